"""Collation ids → character sets → Python codecs, for CHAR/VARCHAR/TEXT values.

TABLE_MAP optional metadata (and information_schema) name a column's collation
by number; the character set behind it says how to turn the stored bytes into
text.

Sources: ``information_schema.COLLATION_CHARACTER_SET_APPLICABILITY`` of MariaDB
10.11 (ids 1-247, 576-738, the NO PAD ids 1025-1270, the UCA-14.0.0 ids
2048-3271) plus the MySQL 8.0/8.4/9.x ids MariaDB does not have
(76 utf8mb3_tolower_ci, 248-250 gb18030, 255-323 utf8mb4_*_0900_*). Where both
servers define an id they agree on the character set.

MariaDB numbers its UCA-14.0.0 collations ``2048 + (charset << 8) + (tailoring << 3)
+ flags`` with charset 0..4 = utf8mb3, utf8mb4, ucs2, utf16, utf32
(strings/ctype-uca1400.h), so :func:`charset_for_collation` also maps ids of
tailorings added after 10.11.

Python's ``cp1252`` leaves 0x81, 0x8D, 0x8F, 0x90 and 0x9D undefined where
MySQL's latin1 maps them to the C1 controls U+0081…; callers decoding latin1
should use an error handler (or fall back) for those five bytes.
"""

from __future__ import annotations

__all__ = ["COLLATIONS", "PY_CODEC", "charset_for_collation", "codec_for_collation"]

# Character set → collation ids, as space-separated ids and inclusive ranges.
_IDS_BY_CHARSET = {
    "big5": "1 84 1025 1108",
    "latin2": "2 9 21 27 77 1033 1101",
    "dec8": "3 69 1027 1093",
    "cp850": "4 80 1028 1104",
    "latin1": "5 8 15 31 47-49 94 1032 1071",
    "hp8": "6 72 1030 1096",
    "koi8r": "7 74 1031 1098",
    "swe7": "10 82 1034 1106",
    "ascii": "11 65 1035 1089",
    "ujis": "12 91 1036 1115",
    "sjis": "13 88 1037 1112",
    "cp1251": "14 23 50-52 1074-1075",
    "hebrew": "16 71 1040 1095",
    "tis620": "18 89 1042 1113",
    "euckr": "19 85 1043 1109",
    "latin7": "20 41-42 79 1065 1103",
    "koi8u": "22 75 1046 1099",
    "gb2312": "24 86 1048 1110",
    "greek": "25 70 1049 1094",
    "cp1250": "26 34 44 66 99 1050 1090",
    "gbk": "28 87 1052 1111",
    "cp1257": "29 58-59 1082-1083",
    "latin5": "30 78 1054 1102",
    "armscii8": "32 64 1056 1088",
    "utf8mb3": "33 76 83 192-215 223 576-578 1057 1107 1216 1238 2048-2215 2232-2247",
    "ucs2": "35 90 128-151 159 640-642 1059 1114 1152 1174 2560-2727 2744-2759",
    "cp866": "36 68 1060 1092",
    "keybcs2": "37 73 1061 1097",
    "macce": "38 43 1062 1067",
    "macroman": "39 53 1063 1077",
    "cp852": "40 81 1064 1105",
    "utf8mb4": "45-46 224-247 255-271 273-275 277-294 296-298 300 303-323 608-610 1069-1070"
    " 1248 1270 2304-2471 2488-2503",
    "utf16": "54-55 101-124 672-674 1078-1079 1125 1147 2816-2983 3000-3015",
    "utf16le": "56 62 1080 1086",
    "cp1256": "57 67 1081 1091",
    "utf32": "60-61 160-183 736-738 1084-1085 1184 1206 3072-3239 3256-3271",
    "binary": "63",
    "geostd8": "92-93 1116-1117",
    "cp932": "95-96 1119-1120",
    "eucjpms": "97-98 1121-1122",
    "gb18030": "248-250",
}


def _expand(table: dict[str, str]) -> dict[int, str]:
    out: dict[int, str] = {}
    for charset, spec in table.items():
        for item in spec.split():
            low, _, high = item.partition("-")
            for collation_id in range(int(low), int(high or low) + 1):
                out[collation_id] = charset
    return dict(sorted(out.items()))


#: Collation id → MySQL/MariaDB character set name (MySQL 8.x/9.x, MariaDB 10.x/11.x).
COLLATIONS: dict[int, str] = _expand(_IDS_BY_CHARSET)

#: Character set name → Python codec; None where bytes are not text (binary) or
#: Python has no codec for the set (armscii8, dec8, geostd8, keybcs2, swe7).
PY_CODEC: dict[str, str | None] = {
    "armscii8": None,
    "ascii": "ascii",
    "big5": "big5",
    "binary": None,
    "cp1250": "cp1250",
    "cp1251": "cp1251",
    "cp1256": "cp1256",
    "cp1257": "cp1257",
    "cp850": "cp850",
    "cp852": "cp852",
    "cp866": "cp866",
    "cp932": "cp932",
    "dec8": None,
    "eucjpms": "euc_jp",
    "euckr": "euc_kr",
    "gb18030": "gb18030",
    "gb2312": "gb2312",
    "gbk": "gbk",
    "geostd8": None,
    "greek": "iso8859_7",
    "hebrew": "iso8859_8",
    "hp8": "hp_roman8",
    "keybcs2": None,
    "koi8r": "koi8_r",
    "koi8u": "koi8_u",
    "latin1": "cp1252",
    "latin2": "iso8859_2",
    "latin5": "iso8859_9",
    "latin7": "iso8859_13",
    "macce": "mac_latin2",
    "macroman": "mac_roman",
    "sjis": "shift_jis",
    "swe7": None,
    "tis620": "cp874",
    "ucs2": "utf-16-be",
    "ujis": "euc_jp",
    "utf16": "utf-16-be",
    "utf16le": "utf-16-le",
    "utf32": "utf-32-be",
    "utf8": "utf-8",
    "utf8mb3": "utf-8",
    "utf8mb4": "utf-8",
}

_UCA1400_MIN = 2048
_UCA1400_MAX = 4095
_UCA1400_CHARSETS = ("utf8mb3", "utf8mb4", "ucs2", "utf16", "utf32")


def charset_for_collation(collation_id: int | None) -> str | None:
    """The character set name of a collation id.

    Returns:
        e.g. ``"utf8mb4"`` for 255, or None for None and for ids neither server
        defines.
    """
    if collation_id is None:
        return None
    charset = COLLATIONS.get(collation_id)
    if charset is None and _UCA1400_MIN <= collation_id <= _UCA1400_MAX:
        index = (collation_id - _UCA1400_MIN) >> 8
        if index < len(_UCA1400_CHARSETS):
            charset = _UCA1400_CHARSETS[index]
    return charset


def codec_for_collation(collation_id: int | None) -> str | None:
    """The Python codec that decodes text stored under a collation id.

    Returns:
        A name :func:`codecs.lookup` accepts, or None for ``binary``, for
        character sets Python cannot decode, for None and for unknown ids
        (the caller then falls back to UTF-8 / base64).
    """
    charset = charset_for_collation(collation_id)
    return None if charset is None else PY_CODEC.get(charset)
