"""One vocabulary: each name fdprof speaks is spelled in one module, read from the source.

Why: a span name, an attribute key, a lock mode or an environment variable spelled twice drifts
apart in one place and the other still "works" (a comparison that is never true, a key nobody
writes). ``fdprof/semconv.py`` spells the trace's names, the engine's modes and faults;
``fdprof/metric_names.py`` the metrics; ``fdprof/settings.py`` the environment variables, and
alone reads or sets the environment. Everything else imports them.

What counts as spelling one: a string constant (not a docstring; f-string pieces included)
equal to a vocabulary value. A value of one lowercase word (``step``, ``ipc``, ``release``) is
also plain English, so it counts only where code compares against it (``==``, ``!=``, ``in``,
``match``, ``.isin``): where a vocabulary value is a decision, not a label. Any ``FDPROF_*`` or
``OTEL_*`` literal counts (a variable settings.py does not declare is undocumented).
"""

from __future__ import annotations

import ast
import enum
import json
import re
from pathlib import Path

import pytest

from fdprof import metric_names, semconv, settings

PACKAGE = Path(__file__).resolve().parents[1] / "fdprof"
#: the modules that spell the vocabulary
VOCABULARY_MODULES = ("semconv.py", "metric_names.py", "settings.py")
ONE_WORD = re.compile(r"^[a-z]+$")
ENV_NAME = re.compile(r"^(FDPROF|OTEL)_[A-Z0-9_]+$")
#: how settings.py's constants that name a variable look (fdprof's, OpenTelemetry's, others')
VARIABLE = re.compile(r"^[A-Z][A-Z0-9]*_[A-Z0-9_]*$")
#: (file, value): why the literal there is not the vocabulary's word
ALLOWED = {
    ("fdprof/adapters/vllm/hooks.py", "execute_model"):
        "vLLM's method GPUModelRunner.execute_model, which the adapter wraps",
    ("fdprof/adapters/vllm/targets.py", "execute_model"):
        "the same vLLM method, in the table of the hook targets checked per version",
    ("fdprof/analysis/breakdown.py", "lock_wait"):
        "the breakdown's part of that name (time in lock_wait spans; JSON key), defined there",
    ("fdprof/engine/config.py", "swap_in"):
        "EngineConfig's field (--swap-in), not the asynchronous engine's swap_in event",
    ("fdprof/engine/config.py", "cache_manager"):
        "EngineConfig's field (--cache-manager), not the cache manager's role",
    ("fdprof/cli/run.py", "cache_manager"):
        "the run JSON's key of that field (--cache-manager), not the cache manager's role",
    ("fdprof/trace/join.py", "step"):
        "the trace model's span column, not the span name",
}  # fmt: skip


def vocabulary() -> dict[str, str]:
    """value -> the name that spells it: semconv's strings, string tuples and enum members,
    the metrics' names and findings, the environment variables settings.py declares."""
    found: dict[str, str] = {}
    for name, value in vars(semconv).items():
        if name.startswith("_"):
            continue
        if isinstance(value, type) and issubclass(value, enum.Enum):
            found.update({m.value: f"semconv.{name}.{m.name}" for m in value})
        elif isinstance(value, str):
            found.setdefault(value, f"semconv.{name}")
        elif isinstance(value, tuple | frozenset) and all(isinstance(v, str) for v in value):
            found.update({v: f"semconv.{name}" for v in value if v not in found})
    for name, value in vars(metric_names).items():
        if isinstance(value, metric_names.Metric):
            found[value.otel_name] = found[value.prom_name] = f"metric_names.{name}"
    found.update({f.value: f"metric_names.Finding.{f.name}" for f in metric_names.Finding})
    for name, value in vars(settings).items():
        if isinstance(value, str) and VARIABLE.match(value):
            found[value] = f"settings.{name}"
    found.update({v: "settings.LEGACY_LOCK" for v in settings.LEGACY_LOCK})
    return found


def _docstrings(tree: ast.AST) -> set[int]:
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }


def _operands(node: ast.AST) -> list[ast.Constant]:
    if isinstance(node, ast.Constant):
        return [node]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [e for e in node.elts if isinstance(e, ast.Constant)]
    return []


def _compared(tree: ast.AST) -> set[int]:
    """The constants code compares against: operands of ==, !=, in (and the elements of a
    tuple, list or set operand), match-case values, the argument of ``.isin``."""
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                ids |= {id(c) for c in _operands(side)}
        elif isinstance(node, ast.MatchValue):
            ids |= {id(c) for c in _operands(node.value)}
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "isin" and node.args:
            ids |= {id(c) for c in _operands(node.args[0])}
    return ids


def spelled(source: str, path: str, words: dict[str, str]) -> list[str]:
    """``path:line: 'value' (the name to use)`` for each vocabulary literal in ``source``."""
    tree = ast.parse(source, path)
    docs, compared = _docstrings(tree), _compared(tree)
    bad = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and type(node.value) is str) or id(node) in docs:
            continue
        value = node.value
        if (path, value) in ALLOWED:
            continue
        if value in words and (not ONE_WORD.match(value) or id(node) in compared):
            bad.append(f"{path}:{node.lineno}: {value!r} (use {words[value]})")
        elif ENV_NAME.match(value) and value not in words:
            bad.append(f"{path}:{node.lineno}: {value!r} (declare it in fdprof/settings.py)")
    return bad


def environment_uses(source: str, path: str) -> list[str]:
    """``path:line: what`` for each touch of the process environment."""
    tree = ast.parse(source, path)
    bad = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
            and node.attr in ("environ", "environb", "getenv", "getenvb", "putenv", "unsetenv")
        ):
            bad.append(f"{path}:{node.lineno}: os.{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            bad += [f"{path}:{node.lineno}: from os import {a.name}" for a in node.names
                    if "env" in a.name]  # fmt: skip
    return bad


def product_files() -> list[tuple[str, str]]:
    """(path from the repository root, source) of every module but the vocabulary's own."""
    return [
        (str(p.relative_to(PACKAGE.parent)), p.read_text())
        for p in sorted(PACKAGE.rglob("*.py"))
        if not (p.parent == PACKAGE and p.name in VOCABULARY_MODULES)
    ]


def test_no_vocabulary_literal_outside_its_module():
    words = vocabulary()
    assert len(words) > 150  # the rule reads the vocabulary, not an empty module
    bad = [line for path, source in product_files() for line in spelled(source, path, words)]
    assert not bad, "vocabulary spelled outside its module:\n" + "\n".join(bad)


def test_every_allowed_literal_is_still_there():
    """An allowance whose literal went away is stale: drop it."""
    sources = dict(product_files())
    stale = [key for key in ALLOWED if f'"{key[1]}"' not in sources.get(key[0], "")]
    assert not stale, stale


def test_only_settings_reads_or_sets_the_environment():
    bad = [line for path, source in product_files() for line in environment_uses(source, path)]
    assert not bad, "the environment outside fdprof/settings.py:\n" + "\n".join(bad)
    own = (PACKAGE / "settings.py").read_text()
    assert environment_uses(own, "fdprof/settings.py")  # the rule sees what it looks for


@pytest.mark.parametrize(
    "source, caught",
    [
        ('if cfg.kv_lock == "ipc":\n    pass\n', "'ipc'"),
        ('ok = op in ("release", "flush")\n', "'release'"),
        ('match mode:\n    case "ipc-per-thread":\n        pass\n', "'ipc-per-thread'"),
        ('rows = syncs[syncs["op"].isin(["acquire"])]\n', "'acquire'"),
        ('KEY = "kv.gpu_read"\n', "'kv.gpu_read'"),
        ('obj = f"mutex:{name}"\n', "'mutex:'"),
        ('faults = {"no-wait-swap-in": 1}\n', "'no-wait-swap-in'"),
        ('path = "FDPROF_RUN_DIR"\n', "'FDPROF_RUN_DIR'"),
        ('limit = "FDPROF_SOMETHING_NEW"\n', "'FDPROF_SOMETHING_NEW'"),
    ],
)
def test_the_rule_sees_spellings_comparisons_and_variables(source, caught):
    assert [caught] == [line.split(": ", 1)[1].split(" (")[0] for line in
                        spelled(source, "planted.py", vocabulary())]  # fmt: skip


@pytest.mark.parametrize(
    "source",
    [
        '"""The step of a request."""\n',  # a docstring
        'label = "step"\n',  # one word, not compared
        'kind = ("lock", "release")\n',
    ],
)
def test_the_rule_leaves_prose_and_labels(source):
    assert spelled(source, "planted.py", vocabulary()) == []


@pytest.mark.parametrize(
    "source",
    [
        "import os\nx = os.environ.get('HOME')\n",
        "import os\nos.environ['X'] = '1'\n",
        "import os\nx = os.getenv('HOME')\n",
        "from os import environ\n",
    ],
)
def test_the_environment_rule_sees_reads_and_writes(source):
    assert environment_uses(source, "planted.py")


def test_the_chrome_scanner_reads_the_vocabularys_keys():
    """The Chrome reader's C scanner (``fdprof/trace/_chromescan.c``) matches the args that
    fill columns, and the sync ops, by name in C: the names must be semconv's, in the order of
    its ``A_*`` indexes, or a renamed key would silently send every event down the Python path
    (or, worse, fill a column from the wrong arg)."""
    source = (PACKAGE / "trace" / "_chromescan.c").read_text()
    table = re.search(r"SPECIAL\[A_SPECIAL\] = \{(.*?)\};", source, re.S)
    assert table, "the scanner's table of special args moved: update this test"
    keys = (semconv.SPAN_ID, semconv.TRUE_TID, semconv.SPAN_LANE, semconv.PARENT_ID,
            semconv.TRACE_ID, semconv.SPAN_ROLE, semconv.SYNC_OP, semconv.SYNC_OBJ,
            semconv.SYNC_SEQ, semconv.SYNC_SPAN, semconv.LANE)  # fmt: skip
    assert tuple(re.findall(r'"([^"]*)"', table.group(1))) == keys
    ops = re.findall(r'str_is\(s, v->i, "(\w+)"\)\) op = (\d)', source)
    assert ops == [(semconv.SyncOp.RELEASE, "0"), (semconv.SyncOp.ACQUIRE, "1")]


def test_the_enums_are_their_strings_on_the_wire():
    """A member is its value in JSON, in f-strings and as a dict key, so run.json, the
    reports and the traces read as before the enums."""
    for kind in (semconv.SyncOp, semconv.LockMode, semconv.SwapIn, semconv.CacheManagerMode,
                 semconv.Fault, metric_names.Finding):  # fmt: skip
        for member in kind:
            assert json.loads(json.dumps({member: member})) == {member.value: member.value}
            assert f"{member}" == member.value and {member.value: 1}[member] == 1
