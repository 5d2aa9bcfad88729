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
