"""The built-in A/B on Cache Manager V1, end to end: its lock A/B (``--cache-manager v1``) and
the old path against V1 (``--compare cache-manager``), both correct protocols: safe, every run
clean and intact, each mode's settings saying which cache manager it ran."""

import json

import pytest
from schemas import validate

from tests.cli import fdprof

#: (the flags, the two modes' labels, their kv_lock and cache_manager settings)
CASES = {
    "v1 lock": (["--cache-manager", "v1"], ("V1 baseline (lock)", "V1 lockless"),
                (("ipc", "v1"), ("none", "v1"))),
    "old vs v1": (["--compare", "cache-manager"], ("old path lockless", "V1 lockless"),
                  (("none", "old"), ("none", "v1"))),
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_v1_ab_is_safe_and_says_what_each_mode_ran(tmp_path, case):
    flags, labels, settings = CASES[case]
    result = fdprof("ab", *flags, "--runs", 2, "--requests", 12, "--out", tmp_path, "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    validate("ab", data)
    assert (data["baseline"]["label"], data["candidate"]["label"]) == labels
    ran = tuple((data["settings"][m]["kv_lock"], data["settings"][m]["cache_manager"])
                for m in ("baseline", "candidate"))  # fmt: skip
    assert ran == settings
    assert data["verdict"]["safety"] == "SAFE"
    assert data["integrity_mismatches"] == 0
    assert all(r["hazards"]["races"] == 0 for r in data["runs"])
