"""Puts ``tests/`` on the import path (pytest does so for a folder with a conftest), so every
test imports the shared helpers that live here (``synthetic``, ``schemas``), holds the
session's shared engine runs, and groups the tests for ``make test``'s workers."""

import collections
import os

import pytest

from tests.runs import EngineRuns


@pytest.fixture(scope="session")
def engine_runs(tmp_path_factory) -> EngineRuns:
    """Real engine runs, one per configuration for the whole session (:mod:`tests.runs`): a test
    that only reads a run's results or trace asks here instead of running its own. Under
    pytest-xdist every worker's base directory is in the session's, where the runs go."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    (shared / "engine-runs").mkdir(exist_ok=True)
    return EngineRuns(tmp_path_factory.mktemp("engine-runs-own"), shared / "engine-runs")


#: session fixtures whose runs one worker makes for every test that reads them: the vLLM
#: server and its runs, the toy A/B. The engine's runs are shared between workers through files
#: instead (tests/runs.py); any other session fixture is cheap, made by each worker that needs it
ONE_WORKER = ("vllm_server", "toy_ab")


def _unit(item: pytest.Item) -> str:
    """What a worker takes whole with this test: its own ``xdist_group``; the tests needing a
    ``ONE_WORKER`` fixture; a module whose tests share a module or class fixture of ours (made
    once); else the test alone."""
    mark = item.get_closest_marker("xdist_group")
    if mark is not None:
        return str(mark.args[0])
    fixtures = item._fixtureinfo.name2fixturedefs
    for name in ONE_WORKER:
        if name in fixtures:
            return f"fixture:{name}"
    if any(d.scope in ("class", "module", "package") and d.baseid.startswith("tests")
           for defs in fixtures.values() for d in defs):  # fmt: skip
        return item.nodeid.split("::")[0]
    return item.nodeid


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]):
    """Under pytest-xdist (``make test``: ``--dist loadgroup``), a worker takes each unit whole
    (:func:`_unit`). The units that make shared runs go first, then those with slow tests, then
    those with property tests, and within each the larger first: the longest should not start
    last."""
    unit = {item: _unit(item) for item in items}
    slow = {unit[i] for i in items if i.get_closest_marker("slow") is not None}
    properties = {unit[i] for i in items if getattr(i, "obj", None) is not None
                  and getattr(i.obj, "is_hypothesis_test", False)}  # fmt: skip
    size = collections.Counter(unit.values())
    for item in items:
        if size[unit[item]] > 1 and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(unit[item]))

    def rank(item: pytest.Item) -> tuple[int, int]:
        u = unit[item]
        tier = 0 if u.startswith("fixture:") else 1 if u in slow else 2 if u in properties else 3
        return tier, -size[u]

    items.sort(key=rank)
    return (yield)  # before pytest-xdist's hook, which names each test's group in its id
