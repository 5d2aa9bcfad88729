"""Record framing: the C walk over record headers agrees with its Python twin and with
``iter_records``, on a real multi-chunk file and on every cut of it near a chunk boundary."""

from __future__ import annotations

import numpy as np
import pytest

from fdprof.formats import records as R
from fdprof.probe.api import key, name
from fdprof.probe.sdk.recorder import open_recorder


@pytest.fixture(scope="module")
def record_bytes(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("rec") / "multi.rec"
    rec = open_recorder(path, "worker")
    n, k = name("swap", "swap"), key("kv.cpu_write")
    for i in range(30_000):  # variable-length records across three chunks
        sid = rec.begin(n)
        rec.set_ints(sid, k, list(range(i % 17)))
        rec.set_str(sid, key("swap.direction"), f"dir-{i % 5}")
        rec.end(sid)
    rec.close()
    data = path.read_bytes()
    assert len(data) > 2 * R.CHUNK
    return data


def _iter_offsets(data: bytes) -> list[int]:
    """Record starts as ``iter_records`` sees them (a record starts where the previous ended,
    or at the next chunk after a zero kind)."""
    ends = [nxt for *_, nxt in R.iter_records(data)]
    starts = []
    for end in [R.FILE_HEADER.size, *ends[:-1]]:
        starts.append(end if data[end] else (end // R.CHUNK + 1) * R.CHUNK)
    return starts


@pytest.mark.skipif(R._c_offsets is None, reason="the C extension is not built")
def test_c_walk_matches_python_and_iter_records(record_bytes):
    c = R.record_offsets(record_bytes)
    assert c.dtype == np.int64
    assert np.array_equal(c, R._python_offsets(record_bytes, R.FILE_HEADER.size))
    assert c.tolist() == _iter_offsets(record_bytes)


@pytest.mark.skipif(R._c_offsets is None, reason="the C extension is not built")
def test_cut_files_read_up_to_their_last_whole_record(record_bytes):
    for cut in range(R.CHUNK - 64, R.CHUNK + 64):
        data = record_bytes[:cut]
        c = R.record_offsets(data)
        assert np.array_equal(c, R._python_offsets(data, R.FILE_HEADER.size)), cut
    assert len(R.record_offsets(record_bytes[:5])) == 0
    with pytest.raises(ValueError):
        R._c_offsets(record_bytes, -1, R.CHUNK)


def test_anchors_of_one_host_share_their_exact_integer_median():
    """Processes of one host get one offset, the median of their own, to the nanosecond (a
    float median of epoch-scale integers is off by up to 2^7 ns); anchors further apart than
    one host's clock keep their own."""
    base = 1_796_399_064_491_294_615
    heads = [R.FileHeader(pid, 10 * pid, base + 10 * pid + d, "worker")
             for pid, d in ((1, 0), (2, -11), (3, 7), (4, 1))]  # fmt: skip
    assert R.epoch_offsets(heads[:3]) == [base] * 3
    assert R.epoch_offsets(heads) == [base] * 4  # even count: the two middle ones' floor mean
    far = heads[:2] + [heads[2]._replace(epoch_anchor_ns=base + 30 + R.SAME_CLOCK_NS + 1)]
    assert R.epoch_offsets(far) == [base, base - 11, base + R.SAME_CLOCK_NS + 1]
    assert R.epoch_offsets([]) == []
