"""Tests for protocol.charsets."""

from __future__ import annotations

import codecs

import pytest

from binlogd.protocol.charsets import COLLATIONS, PY_CODEC, charset_for_collation, codec_for_collation

KNOWN = {
    1: "big5",  # big5_chinese_ci
    8: "latin1",  # latin1_swedish_ci
    11: "ascii",
    28: "gbk",
    33: "utf8mb3",  # utf8mb3_general_ci
    35: "ucs2",
    45: "utf8mb4",  # utf8mb4_general_ci
    46: "utf8mb4",  # utf8mb4_bin
    47: "latin1",  # latin1_bin
    54: "utf16",
    56: "utf16le",
    60: "utf32",
    63: "binary",
    76: "utf8mb3",  # MySQL utf8mb3_tolower_ci
    83: "utf8mb3",  # utf8mb3_bin
    95: "cp932",
    192: "utf8mb3",  # utf8mb3_unicode_ci
    215: "utf8mb3",
    224: "utf8mb4",  # utf8mb4_unicode_ci
    247: "utf8mb4",
    248: "gb18030",  # MySQL gb18030_chinese_ci
    255: "utf8mb4",  # MySQL 8 default utf8mb4_0900_ai_ci
    309: "utf8mb4",  # utf8mb4_0900_bin
    323: "utf8mb4",  # utf8mb4_mn_cyrl_0900_as_cs (8.0.30)
    576: "utf8mb3",  # MariaDB utf8mb3_croatian_ci
    608: "utf8mb4",  # MariaDB utf8mb4_croatian_ci
    1032: "latin1",  # MariaDB latin1_swedish_nopad_ci
    1070: "utf8mb4",  # MariaDB utf8mb4_nopad_bin
    2048: "utf8mb3",  # MariaDB utf8mb3_uca1400_ai_ci
    2304: "utf8mb4",  # MariaDB utf8mb4_uca1400_ai_ci (11.x default)
    2560: "ucs2",
    2816: "utf16",
    3072: "utf32",
}


@pytest.mark.parametrize("collation_id,charset", sorted(KNOWN.items()))
def test_known_ids(collation_id, charset):
    assert COLLATIONS[collation_id] == charset
    assert charset_for_collation(collation_id) == charset


def test_every_charset_has_a_codec_entry_and_every_codec_exists():
    assert set(COLLATIONS.values()) <= set(PY_CODEC)
    for codec in PY_CODEC.values():
        if codec is not None:
            codecs.lookup(codec)  # raises LookupError if Python lacks it


def test_table_size_and_gaps():
    assert len(COLLATIONS) == 1309
    for missing in (0, 17, 100, 125, 152, 184, 216, 251, 272, 276, 295, 299, 301, 302, 324, 1024):
        assert missing not in COLLATIONS
        assert charset_for_collation(missing) is None
        assert codec_for_collation(missing) is None


def test_codecs():
    assert codec_for_collation(8) == "cp1252"
    assert codec_for_collation(33) == "utf-8"
    assert codec_for_collation(255) == "utf-8"
    assert codec_for_collation(63) is None
    assert codec_for_collation(None) is None
    assert codec_for_collation(32) is None  # armscii8: no Python codec
    assert codec_for_collation(35) == "utf-16-be"
    assert codec_for_collation(56) == "utf-16-le"
    assert codec_for_collation(60) == "utf-32-be"
    assert codec_for_collation(13) == "shift_jis"
    assert codec_for_collation(12) == "euc_jp"
    assert codec_for_collation(97) == "euc_jp"
    assert codec_for_collation(18) == "cp874"
    assert codec_for_collation(39) == "mac_roman"
    assert codec_for_collation(38) == "mac_latin2"
    assert PY_CODEC["utf8"] == "utf-8"


def test_decoding_samples():
    assert "€ü".encode("cp1252").decode(codec_for_collation(8)) == "€ü"
    assert b"\x00A\x00\xe9".decode(codec_for_collation(35)) == "Aé"
    assert "привет".encode("koi8_r").decode(codec_for_collation(7)) == "привет"
    assert "日本".encode("cp932").decode(codec_for_collation(95)) == "日本"


def test_uca1400_ids_beyond_the_table():
    # A tailoring MariaDB 10.11 lacks (tailoring 21) still maps by the id layout.
    assert 2048 + (21 << 3) not in COLLATIONS
    assert charset_for_collation(2048 + (21 << 3)) == "utf8mb3"
    assert charset_for_collation(2304 + (21 << 3) + 7) == "utf8mb4"
    assert codec_for_collation(3072 + 255) == "utf-32-be"
    assert charset_for_collation(2048 + (5 << 8)) is None  # charset slot 5 is unused
    assert charset_for_collation(4096) is None
