"""Hand-built traces with a known answer: each ordering mechanism, each seeded fault, and the
non-races the detector must accept."""

import pytest

from fdprof.analysis.hazards import find_hazards
from fdprof.analysis.whatif import what_if_drop_lock

from .builder import TraceBuilder
from .scenarios import ENGINE, TRANSFER, WORKER, swap_in_then_execute

A, B = "1/1", "2/1"


#: the counts of a clean report
CLEAN = dict.fromkeys(
    (
        "races",
        "latent",
        "overlaps",
        "clock_alarms",
        "gaps",
        "broken_locks",
        "lifetime",
        "ownership",
    ),
    0,
)


def counts(trace, **kw):
    return find_hazards(trace, **kw).counts


def test_correct_swap_protocol_is_clean():
    assert counts(swap_in_then_execute()) == CLEAN


def test_no_wait_swap_in_is_a_race_even_without_overlap():
    report = find_hazards(swap_in_then_execute(wait_for=None))
    assert report.counts["races"] == 1 and report.counts["latent"] == 1
    race = report.races.iloc[0]
    assert (race["name_a"], race["name_b"]) == ("swap", "execute_model")
    assert (race["lane_a"], race["lane_b"]) == (TRANSFER, WORKER)
    assert (race["role_a"], race["role_b"]) == ("transfer", "worker")
    assert race["blocks"] == ["gpu:7"] and race["modes"] == "wr"
    assert race["step_b"] == 1 and not race["overlapped"]


def test_no_wait_swap_in_that_overlaps_in_time_is_reported_as_overlap():
    report = find_hazards(swap_in_then_execute(wait_for=None, worker_delay=-40))
    assert report.counts["overlaps"] == 1 and report.counts["latent"] == 0


def test_ack_before_copy_is_a_race():
    # the signal is released inside the copy's span: it does not order the copy
    report = find_hazards(swap_in_then_execute(ack_inside_copy=True))
    assert report.counts["races"] == 1
    assert report.races.iloc[0]["blocks"] == ["gpu:7"]


def test_stale_generation_is_a_race():
    # the scheduler waits on generation 0, an earlier swap's completion, not this swap's
    report = find_hazards(swap_in_then_execute(wait_for=0))
    assert report.counts["races"] == 1 and report.counts["gaps"] == 0


def test_lock_orders_a_no_wait_swap_in_and_the_what_if_exposes_it():
    trace = swap_in_then_execute(wait_for=None, lock=True)
    assert counts(trace)["races"] == 0
    what_if = what_if_drop_lock(trace)
    assert len(what_if.newly_unordered) == 1 and not what_if.safe
    assert what_if.newly_unordered.iloc[0]["name_b"] == "execute_model"


def test_what_if_on_the_correct_protocol_finds_nothing():
    what_if = what_if_drop_lock(swap_in_then_execute(lock=True))
    assert what_if.safe and what_if.with_lock.clean and what_if.without_lock.clean


def test_free_before_swap_out_is_a_race():
    # a copy-out reads gpu block 7 while the next step already writes it
    b = TraceBuilder()
    b.release("queue:swap", 1, ENGINE, seq=1)
    b.acquire("queue:swap", 2, TRANSFER, seq=1)
    b.span(TRANSFER, "swap", 3, 30, reads=(7,), role="transfer")
    b.release("signal:swap_done", 31, TRANSFER, seq=1)
    b.release("queue:batch", 4, ENGINE, seq=2)  # dispatched without waiting for the copy-out
    b.acquire("queue:batch", 5, WORKER, seq=2)
    b.span(WORKER, "execute_model", 6, 20, writes=(7,), role="worker", step=2)
    report = find_hazards(b.build())
    assert report.counts["overlaps"] == 1 and report.races.iloc[0]["modes"] == "rw"


def test_reuse_after_a_proper_chain_is_clean():
    b = TraceBuilder()
    b.span(TRANSFER, "swap", 3, 30, reads=(7,))
    b.release("signal:swap_done", 31, TRANSFER, seq=1)
    b.acquire("signal:swap_done", 32, ENGINE, seq=1)
    b.release("queue:batch", 33, ENGINE, seq=2)
    b.acquire("queue:batch", 34, WORKER, seq=2)
    b.span(WORKER, "execute_model", 35, 50, writes=(7,))
    assert counts(b.build())["races"] == 0


def test_two_swaps_into_one_host_block_race():
    b = TraceBuilder()
    b.span(A, "swap", 1, 10, writes=(3,), pool="cpu")
    b.span(B, "swap", 20, 30, writes=(3,), pool="cpu")
    report = find_hazards(b.build())
    assert report.races.iloc[0]["blocks"] == ["cpu:3"] and report.races.iloc[0]["modes"] == "ww"


def test_same_block_number_in_different_pools_is_not_a_conflict():
    b = TraceBuilder()
    b.span(A, "swap", 1, 10, writes=(3,), pool="cpu")
    b.span(B, "execute_model", 1, 10, writes=(3,), pool="gpu")
    assert counts(b.build())["races"] == 0


def test_same_lane_accesses_are_ordered():
    b = TraceBuilder()
    b.span(A, "execute_model", 1, 10, writes=(3,))
    b.span(A, "execute_model", 5, 20, writes=(3,))
    assert counts(b.build()) == CLEAN


@pytest.mark.parametrize(("other", "race"), [((2, 4), False), ((1, 3), True), ((-1, -1), True)])
def test_layer_ranges(other, race):
    b = TraceBuilder()
    b.span(A, "swap", 1, 10, writes=(3,), layers=(0, 2))
    b.span(B, "execute_model", 1, 10, reads=(3,), layers=other)
    assert counts(b.build())["races"] == int(race)


def test_read_read_sharing_is_not_a_race():
    b = TraceBuilder()
    b.span(A, "swap", 1, 10, reads=(3,))
    b.span(B, "execute_model", 1, 10, reads=(3,))
    assert counts(b.build())["races"] == 0


def test_missing_release_is_a_gap_not_a_race():
    b = TraceBuilder()
    b.span(A, "swap", 1, 10, writes=(3,))
    b.release("queue:batch", 11, A, seq=1)
    b.acquire("queue:batch", 12, B, seq=1)
    b.acquire("queue:result", 13, B, seq=9)  # nobody released result 9
    b.span(B, "execute_model", 14, 20, reads=(3,))
    report = find_hazards(b.build())
    assert report.counts["races"] == 0 and report.counts["gaps"] == 1
    gap = report.gaps.iloc[0]
    assert (gap["kind"], gap["obj"], gap["seq"], gap["lane"]) == (
        "no_release",
        "queue:result",
        9,
        B,
    )


def test_first_acquire_of_a_lock_needs_no_release_but_later_ones_do():
    b = TraceBuilder()
    b.acquire("lock:kv", 1, A)
    b.acquire("lock:kv", 2, B)
    report = find_hazards(b.build())
    assert report.gaps["kind"].tolist() == ["no_release"] and report.gaps["lane"].tolist() == [B]


def test_skewed_clock_that_is_still_ordered_is_an_alarm_only():
    # the worker's clock runs 50 ns behind: its span seems to overlap the copy, yet the
    # signal and the batch queue order them
    report = find_hazards(swap_in_then_execute(skew_worker=-50))
    assert report.counts["races"] == 0 and report.counts["clock_alarms"] == 1
    alarm = report.alarms.iloc[0]
    assert {alarm["name_a"], alarm["name_b"]} == {"swap", "execute_model"}


def test_truncated_lane_is_a_gap_and_its_accesses_are_not_judged():
    b = TraceBuilder()
    b.span(A, "swap", 1, -1, writes=(3,))
    b.span(B, "execute_model", 2, 10, writes=(3,))
    report = find_hazards(b.build())
    assert report.counts["races"] == 0
    assert report.gaps[["kind", "lane"]].values.tolist() == [["truncated", A]]


def test_sync_cycle_is_a_gap_and_does_not_hang():
    b = TraceBuilder()
    b.acquire("queue:x", 1, A, seq=1)
    b.release("queue:y", 2, A, seq=1)
    b.acquire("queue:y", 1, B, seq=1)
    b.release("queue:x", 2, B, seq=1)
    report = find_hazards(b.build())
    assert report.gaps["kind"].tolist() == ["cycle"]


def test_broadcast_release_orders_every_acquirer():
    b = TraceBuilder()
    b.span(A, "swap", 1, 10, writes=(3,))
    b.release("signal:swap_done", 11, A, seq=4)
    for lane in (B, "3/1"):
        b.acquire("signal:swap_done", 12, lane, seq=4)
        b.span(lane, "execute_model", 13, 20, reads=(3,))
    assert counts(b.build())["races"] == 0


def test_json_shape():
    doc = find_hazards(swap_in_then_execute(wait_for=None)).to_json()
    counts = set(CLEAN)
    assert set(doc["counts"]) == counts
    assert doc["races"][0]["blocks"] == ["gpu:7"] and doc["races"][0]["overlapped"] is False


def test_missing_column_is_one_clear_error():
    from fdprof.errors import FdprofError

    trace = swap_in_then_execute()
    trace.accesses = trace.accesses.drop(columns="mode")
    with pytest.raises(FdprofError, match="accesses table lacks column"):
        find_hazards(trace)


def test_a_mutex_orders_threads_of_one_process_only():
    def trace(reader_lane):
        b = TraceBuilder()
        b.span("1/1", "schedule", 1, 10, writes=(3,))
        b.release("mutex:kv_cache", 11, "1/1")
        b.acquire("mutex:kv_cache", 12, reader_lane)
        b.span(reader_lane, "execute_model", 13, 20, reads=(3,))
        return b.build()

    assert counts(trace("1/2"))["races"] == 0  # same process: the mutex orders them
    assert counts(trace("2/1"))["races"] == 1  # another process's mutex of the same name


def test_dp_groups_have_their_own_blocks_and_channels():
    from fdprof.trace.model import frame

    b = TraceBuilder()
    for rank, (eng, wrk) in enumerate((("10/1", "11/1"), ("20/1", "21/1"))):
        b.span(eng, "swap", 1 + rank, 10, writes=(3,))
        b.release("queue:batch", 11 + 5 * rank, eng, seq=1)
        b.acquire("queue:batch", 12 + 5 * rank, wrk, seq=1)
        b.span(wrk, "execute_model", 13 + 5 * rank, 30, reads=(3,))
    trace = b.build()
    assert counts(trace)["races"] > 0  # without groups: blocks and seqs collide
    procs = {
        "pid": [10, 11, 20, 21], "role": ["engine", "worker"] * 2,
        "name": ["engine-0", "worker-0", "engine-1", "worker-1"], "anchored": [True] * 4,
    }  # fmt: skip
    procs["tp_rank"] = [-1] * 4
    trace.processes = frame("processes", procs | {"dp_rank": [-1] * 4})
    trace.meta["config"] = {"dp": 2}
    assert counts(trace)["races"] > 0  # neither names nor the config make groups: ranks do
    trace.processes = frame("processes", procs | {"dp_rank": [0, 0, 1, 1]})
    assert counts(trace)["races"] == 0


def test_seqs_at_the_ends_of_int64_pair_exactly():
    # once a traceback (the packed (obj, seq) key overflowed): exit 1, read as "races found"
    for seq in (2**63 - 1, -(2**63), -1, 0, 2**62 + 3):
        b = TraceBuilder()
        b.span(A, "swap", 0, 10, writes=(7,))
        b.release("signal:done", 11, A, seq)
        b.release("signal:done", 12, A, 2**63 - 1 if seq != 2**63 - 1 else 0)
        b.acquire("signal:done", 20, B, seq)
        b.span(B, "execute_model", 21, 30, reads=(7,))
        assert counts(b.build()) == CLEAN, seq


def test_an_acquire_never_pairs_with_another_objects_release():
    # queue:b seq -3 and queue:a seq 9 packed to one integer once (max seq 10): the acquire
    # took queue:a's release, and the race below vanished
    b = TraceBuilder()
    b.span(A, "swap", 0, 10, writes=(7,))
    b.release("queue:a", 11, A, 9)
    b.release("queue:a", 12, A, 10)
    b.acquire("queue:b", 20, B, -3)
    b.span(B, "execute_model", 21, 30, reads=(7,))
    report = find_hazards(b.build())
    assert report.counts["races"] == 1
    assert report.gaps["kind"].tolist() == ["no_release"]


def test_a_keyed_seq_of_minus_one_is_matched_exactly_not_in_time_order():
    b = TraceBuilder()
    b.span(A, "swap", 0, 10, writes=(7,))
    b.release("queue:a", 11, A)  # unkeyed: not the release of seq -1
    b.acquire("queue:a", 20, B, -1)
    b.span(B, "execute_model", 21, 30, reads=(7,))
    assert counts(b.build())["races"] == 1
    b.release("queue:a", 12, A, -1)
    assert counts(b.build())["races"] == 0


def _two_shards(tp: tuple[int, int], dp: tuple[int, int] = (0, 0)):
    """Two transfer processes each writing block 12 of their own pool, unordered."""
    b = TraceBuilder()
    for pid, d, t in ((10, dp[0], tp[0]), (20, dp[1], tp[1])):
        b.process(pid, d, t, "transfer")
    b.span("10/1", "swap", 0, 10, writes=(12,))
    b.span("20/1", "swap", 2, 12, writes=(12,))
    return b


def test_equal_block_ids_of_two_tp_ranks_are_different_memory():
    assert counts(_two_shards((0, 1)).build())["races"] == 0
    assert counts(_two_shards((1, 1)).build())["races"] == 1  # same rank: one pool
    assert counts(_two_shards((0, 0), dp=(0, 1)).build())["races"] == 0
    assert counts(_two_shards((0, 0), dp=(1, 1)).build())["races"] == 1
    report = find_hazards(_two_shards((1, 1), dp=(0, 1)).build())
    assert report.counts["races"] == 0


def test_a_process_of_unknown_tp_rank_may_touch_any_shard_of_its_group():
    b = _two_shards((0, 1))
    b.process(30, 0, -1, "engine")
    b.span("30/1", "evict", 4, 6, reads=(12,))
    report = find_hazards(b.build())
    # the engine's read races with both ranks' writes; the ranks' writes do not race
    assert sorted(map(tuple, report.races[["span_a", "span_b"]].to_numpy().tolist())) == [
        (1, 3), (2, 3)]  # fmt: skip
    assert report.accesses == 3
    assert sorted(report.races["blocks"].sum()) == ["gpu@tp0:12", "gpu@tp1:12"]


def test_collectives_pair_across_dp_groups_and_channels_do_not():
    # a worker of each DP group: an EP all-to-all joins them; their queues are their own
    b = TraceBuilder()
    b.process(10, 0, -1, "worker")
    b.process(20, 1, -1, "worker")
    b.span("10/1", "execute_model", 0, 10)
    b.release("collective:ep/rank0", 11, "10/1", 1)
    b.acquire("collective:ep/rank0", 20, "20/1", 1)
    b.release("queue:batch", 12, "10/1", 5)
    b.acquire("queue:batch", 21, "20/1", 5)
    report = find_hazards(b.build())
    assert report.gaps["obj"].tolist() == ["queue:batch@dp1"]  # no release in group 1
