"""``info``'s reads (``protocol/fileinfo.py:_File``): every read gives the file's bytes, and each byte is asked of the
file at most once, so ``bytes_read`` never exceeds the size, whatever the order of the reads (the header walk, the
tail read backwards, the first GTID's forward reads), with the kept bytes dropped behind the walk and read-ahead on
or off. A read that spans kept segments and gaps makes and merges segments while it goes through them."""

from __future__ import annotations

import io
import random

import pytest

from binlogd.library.storage import CountingReader
from binlogd.protocol.fileinfo import _File


def _file(data: bytes) -> tuple[_File, CountingReader]:
    counted = CountingReader(io.BytesIO(data), len(data))
    return _File(counted), counted


def test_a_read_across_segments_and_gaps_that_merge():
    data = bytes(range(256)) * 3
    f, counted = _file(data[:702])
    for offset, n in [(612, 48), (488, 63), (91, 165), (129, 23), (668, 241), (86, 283), (612, 242), (322, 91),
                      (401, 85), (357, 273)]:
        assert f.read(offset, n) == data[offset:min(offset + n, 702)], (offset, n)
    assert counted.bytes_read <= 702


@pytest.mark.parametrize("seed", range(4))
def test_random_reads_give_the_bytes_and_count_each_once(seed):
    rng = random.Random(seed)
    for _ in range(1500):
        size = rng.randrange(1, 2000)
        data = rng.randbytes(size)
        f, counted = _file(data)
        floor = 0
        for _ in range(rng.randrange(1, 30)):
            what = rng.random()
            if what < 0.1:
                f.readahead = rng.choice([0, 16, 64, 1 << 20])
            elif what < 0.2:
                floor = max(floor, rng.randrange(0, size + 1))
                f.forget_before(floor)
            else:
                offset, n = rng.randrange(floor, size + 1), rng.randrange(0, 300)
                assert f.read(offset, n) == data[offset:offset + n], (size, offset, n)
        assert counted.bytes_read <= size
