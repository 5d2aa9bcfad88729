import pytest

from engine.config import DeprecatedSetting, EngineConfig, resolve_kv_lock
from fdprof.errors import FdprofError


def test_default_is_lockless():
    assert resolve_kv_lock(None, {}) == "none"


def test_legacy_env_selects_baseline_with_a_warning():
    with pytest.warns(DeprecatedSetting, match="FD_USE_KVCACHE_LOCK"):
        assert resolve_kv_lock(None, {"FD_USE_KVCACHE_LOCK": "1"}) == "ipc"


def test_explicit_flag_wins_over_env():
    assert resolve_kv_lock("none", {"FD_USE_KVCACHE_LOCK": "1"}) == "none"


@pytest.mark.parametrize(
    "bad", [{"kv_lock": "mutex"}, {"fault": "nope"}, {"requests": 0}, {"fault_delay_ms": -1.0}]
)
def test_bad_settings_are_one_line_errors(bad):
    with pytest.raises(FdprofError):
        EngineConfig(**bad)
