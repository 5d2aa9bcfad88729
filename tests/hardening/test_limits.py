"""The input limits: real traces of every layout pass them, a limit is lifted by its flag or
its environment variable, and input that is large only on paper (holes, ids) costs nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from corpus import GiB, _one_rec, _span, _string, _x
from test_crafted_inputs import capped

from fdprof.errors import FdprofError
from fdprof.trace import limits, load

#: the real third-party traces beside the checkout (../shared/data)
DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
DEEP = 70  # past the default depth limit (64)


def deep_trace(path):
    value = 0
    for _ in range(DEEP):
        value = [value]
    path.write_text(json.dumps({"traceEvents": [_x(args={"deep": value})]}))
    return path


def test_a_limit_is_lifted_by_its_flag_or_its_environment_variable(tmp_path):
    path = deep_trace(tmp_path / "deep.json")
    out = tmp_path / "out.json"
    refused = capped("convert", str(path), str(out))
    assert refused.returncode == 2
    assert "--max-depth" in refused.stderr and "FDPROF_MAX_DEPTH" in refused.stderr
    assert capped("convert", "--max-depth", "100", str(path), str(out)).returncode == 0
    assert capped("--max-depth", "0", "convert", str(path), str(out)).returncode == 0
    env = os.environ | {"FDPROF_MAX_DEPTH": "100"}
    assert capped("convert", str(path), str(out), env=env).returncode == 0


def test_a_bad_limit_value_is_a_usage_error(tmp_path):
    result = capped("hazards", "--max-event-size", "lots", str(tmp_path))
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "--max-event-size" in result.stderr


def test_sizes_take_suffixes():
    assert limits.parse("event_size", "64M") == 64 << 20
    assert limits.parse("event_size", "1.5k") == 1536
    assert limits.parse("inflate_ratio", "2.5") == 2.5
    with pytest.raises(FdprofError):
        limits.parse("depth", "-3")


def test_the_event_size_limit_counts_one_event_not_the_document(tmp_path, monkeypatch):
    """A document far larger than the limit loads, laid out either way; one event over it
    does not."""
    monkeypatch.setenv("FDPROF_MAX_EVENT_SIZE", "64K")
    events = [_x(ts=i, name=f"n{i % 7}") for i in range(20_000)]  # ~1.5 MB
    minified = tmp_path / "minified.json"
    minified.write_text(json.dumps(events, separators=(",", ":")))
    pretty = tmp_path / "pretty.json"
    pretty.write_text("[\n" + ",\n".join(json.dumps(e) for e in events) + "\n]")
    assert len(load(minified).spans) == len(load(pretty).spans) == len(events)
    big = tmp_path / "big.json"
    big.write_text(json.dumps([_x(name="n" * 3_000_000)]))  # past the 1 MiB a read takes
    with pytest.raises(FdprofError, match="maximum event size.*--max-event-size"):
        load(big)


def test_a_real_gzip_trace_is_within_the_inflate_ratio(monkeypatch):
    """A PyTorch-profiler trace (HTA's, 33 MB inflated from 1.6 MB: 21x) loads; held to a
    ratio below its own, it is refused."""
    path = DATA / "hta" / "test.json.gz"
    assert len(load(path).spans) > 0
    monkeypatch.setenv("FDPROF_MAX_INFLATE_RATIO", "10")
    with pytest.raises(FdprofError, match="gzip bomb.*--max-inflate-ratio"):
        load(path)


def test_a_sparse_record_file_costs_its_content_not_its_size(tmp_path):
    """8 GiB of holes after the records (a writer killed after growing its file): read under
    the 3 GiB cap, the holes skipped."""
    run = _one_rec(tmp_path, _string(1, "execute_model") + _span(1, 1))
    os.truncate(next(run.glob("*.rec")), 8 * GiB)
    result = capped("convert", "--json", str(run), str(tmp_path / "out.json"))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["spans"] == 1


def test_string_ids_anywhere_in_their_range_cost_nothing(tmp_path):
    run = _one_rec(tmp_path, _string(2**32 - 1, "execute_model") + _span(1, 2**32 - 1))
    result = capped("convert", "--json", str(run), str(tmp_path / "out.json"))
    assert result.returncode == 0, result.stderr
    assert load(run).spans["name"].tolist() == ["execute_model"]


def test_a_call_that_ends_before_its_pid_is_read_is_answered(monkeypatch, tmp_path):
    """The capped server answers a call with two lines, its pid and its status; when both are
    in the pipe before the first is read, the status is not lost in a read buffer (select()
    found the pipe empty and the call hung until the guard killed it)."""
    import time

    import capped as server

    monkeypatch.setattr(server, "HANG_S", 10)
    status = server._Server._status

    def late(self):
        time.sleep(1)  # the call has ended: both its lines are waiting
        return status(self)

    monkeypatch.setattr(server._Server, "_status", late)
    result = capped("hazards", str(tmp_path / "absent.json"))
    assert result.returncode == 2 and "absent.json" in result.stderr
