import pytest

from fdprof.engine.config import DeprecatedSetting, EngineConfig, resolve_kv_lock
from fdprof.errors import FdprofError


def test_default_is_lockless():
    assert resolve_kv_lock(None, {}) == "none"


@pytest.mark.parametrize("name", ["USE_KVCACHE_LOCK", "FD_USE_KVCACHE_LOCK"])
def test_both_legacy_spellings_select_the_baseline_with_a_warning(name):
    """FastDeploy PR #6724 names the switch both ways; either selects the shared-descriptor
    baseline, with a deprecation message naming the spelling used."""
    with pytest.warns(DeprecatedSetting, match=f"^{name}=1 is deprecated; use --kv-lock ipc"):
        assert resolve_kv_lock(None, {name: "1"}) == "ipc"
    assert resolve_kv_lock(None, {name: "0"}) == "none"


def test_explicit_flag_wins_over_env():
    assert resolve_kv_lock("none", {"FD_USE_KVCACHE_LOCK": "1"}) == "none"


@pytest.mark.parametrize(
    "bad",
    [
        {"kv_lock": "mutex"},
        {"fault": "nope"},
        {"requests": 0},
        {"fault_delay_ms": -1.0},
        {"tp": 0},
        {"tp": 3},  # does not divide the 8 KV heads
    ],
)
def test_bad_settings_are_one_line_errors(bad):
    with pytest.raises(FdprofError):
        EngineConfig(**bad)


def test_async_swap_in_is_for_the_lockless_engine_only():
    assert EngineConfig(swap_in="async").swap_in == "async"
    for lock in ("ipc", "ipc-per-thread"):
        with pytest.raises(FdprofError, match="--swap-in async needs --kv-lock none"):
            EngineConfig(kv_lock=lock, swap_in="async")


def test_modes_given_as_strings_are_the_enums_and_run_json_keeps_the_strings():
    """run.json and the CLI hand the modes over as strings: the config holds the enum members
    (``cfg.kv_lock.locked``, ``cfg.fault is Fault.X``), and writes back the same strings."""
    import json

    from fdprof.semconv import Fault, LockMode, SwapIn

    cfg = EngineConfig(kv_lock="ipc-per-thread", fault="ack-before-copy")
    assert cfg.kv_lock is LockMode.IPC_PER_THREAD and cfg.locked
    assert cfg.fault is Fault.ACK_BEFORE_COPY and cfg.swap_in is SwapIn.SYNC
    written = json.loads(json.dumps(cfg.to_dict()))
    assert (written["kv_lock"], written["fault"], written["swap_in"]) == (
        "ipc-per-thread",
        "ack-before-copy",
        "sync",
    )
    assert EngineConfig(**written) == cfg
