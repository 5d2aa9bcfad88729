"""The same answers as before the typed trace model, on every reference trace and on the real
third-party traces: ``hazards --json``, ``diff --json`` and the Perfetto export
(``answers.py`` says how they were recorded and how to regenerate them)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from answers import answer, available, cases, expected

CASES = cases()


@pytest.fixture(scope="module")
def golden() -> dict[str, Any]:
    return expected()


def differences(want: Any, got: Any, where: str = "") -> list[str]:
    """Where two answers differ, leaf by leaf; floats agree to 1e-12 (summation order), NaN
    with NaN."""
    if isinstance(want, dict) and isinstance(got, dict):
        out = [f"{where}.{k}: missing" for k in want.keys() - got.keys()]
        out += [f"{where}.{k}: unexpected" for k in got.keys() - want.keys()]
        for k in want.keys() & got.keys():
            out += differences(want[k], got[k], f"{where}.{k}")
        return out
    if isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            return [f"{where}: {len(want)} items expected, got {len(got)}"]
        return [d for i, (w, g) in enumerate(zip(want, got, strict=True))
                for d in differences(w, g, f"{where}[{i}]")]  # fmt: skip
    if type(want) is float and type(got) is float:
        if math.isclose(want, got, rel_tol=1e-12, abs_tol=1e-12) or (
            math.isnan(want) and math.isnan(got)
        ):
            return []
    elif type(want) is type(got) and want == got:
        return []
    return [f"{where}: expected {want!r}, got {got!r}"[:300]]


@pytest.mark.parametrize("name", list(CASES))
def test_same_answer(name, golden):
    argv = CASES[name]
    if not available(argv):
        pytest.skip("../shared/data is not beside this checkout")
    assert name in golden, "a case without a recorded answer: run answers.py --update"
    found = differences(golden[name], answer(argv))
    assert not found, "\n".join(found[:20])
