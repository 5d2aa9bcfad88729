from __future__ import annotations

import pytest
from probe_records import IMPLS

from fdprof import settings


@pytest.fixture(params=IMPLS)
def impl(request, monkeypatch) -> str:
    """Run a test against both twins: the pure-Python recorder and the C extension."""
    monkeypatch.setenv(settings.RECORDER, request.param)
    return request.param
