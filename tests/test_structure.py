"""The package's import rules, read from the source (every import, deferred ones too).

Why: the engine is the *observed* program. It may speak only the probe's API and the
vocabulary; what drives engines and judges their runs (the A/B, the regression suite, the CLI)
lives on fdprof's side and imports the engine, never the reverse. A deferred import inside a
function hides a cycle from import graphs, so these tests read every ``import`` statement and
every ``importlib.import_module("...")`` literal, wherever it stands.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "fdprof"
ENGINE = "fdprof.engine"

#: what the engine may import from fdprof besides itself: the probe, the vocabulary, and the
#: small process utilities (errors, settings, safe files, signal handling)
ENGINE_MAY_IMPORT = (
    "fdprof.probe",
    "fdprof.semconv",
    "fdprof.errors",
    "fdprof.settings",
    "fdprof.files",
    "fdprof.interrupts",
)
#: the only parts of fdprof that drive the engine (and so may import it)
DRIVERS = ("fdprof.cli", "fdprof.ab", "fdprof.regress")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, module: str) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in ``path`` (the module ``module``), at
    any depth."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            found.append((node.lineno, name))
            # `from fdprof import analysis` imports the submodule fdprof.analysis
            found += [(node.lineno, f"{name}.{alias.name}") for alias in node.names]
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append((node.lineno, node.args[0].value))
    return found


def within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def fdprof_modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def engine_violations(files: list[tuple[Path, str]]) -> list[str]:
    """Imports of fdprof's judging side in the engine's ``(path, module)`` files."""
    return [
        f"{module}:{line}: {name}"
        for path, module in files
        for line, name in imports_of(path, module)
        if within(name, ("fdprof",))
        and name != "fdprof"
        and not within(name, (ENGINE, *ENGINE_MAY_IMPORT))
    ]


def test_the_engine_imports_only_the_probe_the_vocabulary_and_itself():
    engine_files = [(p, module_name(p)) for p in fdprof_modules()]
    engine_files = [(p, m) for p, m in engine_files if within(m, (ENGINE,))]
    assert len(engine_files) > 10  # the rule reads the engine, not an empty folder
    bad = engine_violations(engine_files)
    assert not bad, "the engine imports fdprof's judging side:\n" + "\n".join(bad)


def test_only_the_drivers_import_the_engine():
    bad = [
        f"{p.relative_to(PACKAGE.parent)}:{line}: {name}"
        for p in fdprof_modules()
        if not within(module_name(p), (ENGINE, *DRIVERS))
        for line, name in imports_of(p, module_name(p))
        if within(name, (ENGINE,))
    ]
    assert not bad, "only the CLI, the A/B and the regression suite drive the engine:\n" + (
        "\n".join(bad)
    )


@pytest.mark.parametrize(
    "source, forbidden",
    [
        ("from fdprof.analysis.hazards import find_hazards\n", "fdprof.analysis.hazards"),
        ("def f():\n    from fdprof import trace\n", "fdprof.trace"),
        ("def f():\n    from .. import report\n", "fdprof.report"),
        ("from ..ab import arms\n", "fdprof.ab.arms"),
        ("import importlib\nimportlib.import_module('fdprof.cli')\n", "fdprof.cli"),
    ],
)
def test_the_rule_sees_deferred_relative_and_dynamic_imports(tmp_path, source, forbidden):
    planted = tmp_path / "planted.py"
    planted.write_text(source)
    bad = engine_violations([(planted, "fdprof.engine.planted")])
    assert forbidden in [v.rsplit(": ", 1)[1] for v in bad]
