"""``[sink.mirror] schema_map``: the TOML table form, the older list form, the env's and the command line's text
form, and bad values (one config error line, exit 2)."""

from __future__ import annotations

import subprocess

import pytest

from binlogd.daemon.config import load_config
from binlogd.daemon.configbase import ConfigError
from binlogd.daemon.sinks import make_sink
from tests.support.daemon import BINLOGD, REPO


def write(tmp_path, line: str) -> str:
    path = tmp_path / "binlogd.toml"
    path.write_text(f'[sink]\nkind = "mirror"\n[sink.mirror]\n{line}\n')
    return str(path)


@pytest.mark.parametrize("line", [
    'schema_map = { shop = "shop_copy", "my db" = "Über" }',
    'schema_map = ["shop=shop_copy", "my db=Über"]',
    '[sink.mirror.schema_map]\nshop = "shop_copy"\n"my db" = "Über"',
])
def test_forms_of_a_file(tmp_path, line):
    config = load_config(write(tmp_path, line), env={})
    assert config.sink.mirror.schema_map == {"shop": "shop_copy", "my db": "Über"}
    assert make_sink(config.sink).tables.schema_map == {"shop": "shop_copy", "my db": "Über"}
    hash(config)  # a config stays hashable and its map cannot change
    with pytest.raises(TypeError):
        config.sink.mirror.schema_map["shop"] = "x"


def test_default_and_text_forms(tmp_path):
    assert load_config(None, env={}).sink.mirror.schema_map == {}
    env = {"BINLOGD_SINK__MIRROR__SCHEMA_MAP": "shop=shop_copy, b = c"}
    assert load_config(None, env=env).sink.mirror.schema_map == {"shop": "shop_copy", "b": "c"}
    cli = load_config(write(tmp_path, 'schema_map = { a = "x" }'), env={},
                      overrides={"sink.mirror.schema_map": "shop=other"})
    assert cli.sink.mirror.schema_map == {"shop": "other"}


@pytest.mark.parametrize("line, message", [
    ('schema_map = ["shop"]', "items must be 'key=value' (or write a table"),
    ('schema_map = { shop = 3 }', 'must be a table of strings ({ key = "value" }), got {\'shop\': 3}'),
    ('schema_map = "shop=x"', "must be a table of strings"),
    ('schema_map = { shop = "" }', "must map a schema name to a PostgreSQL schema name of 1-63 bytes"),
    (f'schema_map = {{ shop = "{"x" * 64}" }}', "of 1-63 bytes"),
])
def test_bad_values(tmp_path, line, message):
    path = write(tmp_path, line)
    with pytest.raises(ConfigError) as err:
        load_config(path, env={})
    assert str(err.value).startswith("config error: sink.mirror.schema_map: ")
    assert message in str(err.value) and str(err.value).endswith(f"(from {path})")


def test_bad_value_exits_2_with_one_line(tmp_path):
    path = write(tmp_path, 'schema_map = ["shop"]')
    done = subprocess.run([*BINLOGD, "run", "--config", path], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "sink.mirror.schema_map" in lines[0] and "Traceback" not in done.stderr, lines
