"""Puts ``tests/`` on the import path (pytest does so for a folder with a conftest), so every
test imports the shared helpers that live here (``synthetic``, ``schemas``), and holds
the session's shared engine runs."""

import pytest

from tests.runs import EngineRuns


@pytest.fixture(scope="session")
def engine_runs(tmp_path_factory) -> EngineRuns:
    """Real engine runs, one per configuration for the whole session (:mod:`tests.runs`): a test
    that only reads a run's results or trace asks here instead of running its own."""
    return EngineRuns(tmp_path_factory.mktemp("engine-runs"))
