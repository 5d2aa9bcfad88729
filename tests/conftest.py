"""Puts ``tests/`` on the import path (pytest does so for a folder with a conftest), so every
test imports the shared helpers that live here (``synthetic``, ``schemas``), holds the
session's shared engine runs, and groups the tests for ``make test``'s workers."""

import collections

import pytest

from tests.runs import EngineRuns


@pytest.fixture(scope="session")
def engine_runs(tmp_path_factory) -> EngineRuns:
    """Real engine runs, one per configuration for the whole session (:mod:`tests.runs`): a test
    that only reads a run's results or trace asks here instead of running its own."""
    return EngineRuns(tmp_path_factory.mktemp("engine-runs"))


def _shared_groups(items: list[pytest.Item]) -> dict[str, str]:
    """Module -> its group: the modules that share a session fixture of ours (a run made once
    for the session) form one group, every other module is a group of its own."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    for item in items:
        module = item.nodeid.split("::")[0]
        find(module)
        for name, defs in item._fixtureinfo.name2fixturedefs.items():
            if any(d.scope == "session" and d.baseid.startswith("tests") for d in defs):
                parent[find(module)] = find(f"fixture:{name}")
    return {m: find(m) for m in parent if not m.startswith("fixture:")}


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]):
    """Under pytest-xdist (``make test``: ``--dist loadgroup``), a worker takes a whole group:
    a module (its module fixtures made once), or the modules sharing a session fixture (the
    session's engine runs, the vLLM runs: made once, on one worker). The groups that share
    runs, then those with slow tests, then those with property tests, and within each the
    larger first: the longest should not start last."""
    modules = _shared_groups(items)
    group = {item: modules[item.nodeid.split("::")[0]] for item in items}
    slow = {group[i] for i in items if i.get_closest_marker("slow") is not None}
    properties = {group[i] for i in items if getattr(i, "obj", None) is not None
                  and getattr(i.obj, "is_hypothesis_test", False)}  # fmt: skip
    for item in items:
        item.add_marker(pytest.mark.xdist_group(group[item]))

    size = collections.Counter(group.values())

    def rank(item: pytest.Item) -> tuple[int, int]:
        g = group[item]
        tier = 0 if g.startswith("fixture:") else 1 if g in slow else 2 if g in properties else 3
        return tier, -size[g]

    items.sort(key=rank)
    return (yield)  # before pytest-xdist's hook, which names each test's group in its id
