"""The package's import rules, read from the source (every import, deferred ones too).

Why: instrumented code (the engine, the vLLM adapter) is the *observed* program. It speaks the
probe's API and the vocabulary; the probe's SDK (its sinks) sits behind the API, which never
imports it, as OpenTelemetry's API never imports its SDK; each instrumented program touches the
SDK in the one place that sets its processes up. What drives engines and judges their runs
(the A/B, the regression suite, the CLI) lives on fdprof's side and imports the engine, never
the reverse. The trace model reads files through the neutral formats (``fdprof.formats``),
never through the probe. A deferred import inside a function hides a cycle from import graphs,
so these tests read every ``import`` statement and every ``importlib.import_module("...")``
literal, wherever it stands.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "fdprof"
ENGINE = "fdprof.engine"
ADAPTER = "fdprof.adapters.vllm"
TRACE = "fdprof.trace"
PROBE = "fdprof.probe"
SDK = "fdprof.probe.sdk"

#: what instrumented code may import from fdprof besides itself: the probe's API (the package
#: and its modules; the SDK excepted below), the vocabulary, the neutral formats and the small
#: process utilities (errors, settings, safe files, signal handling)
INSTRUMENTED_MAY_IMPORT = (
    PROBE,
    "fdprof.semconv",
    "fdprof.formats",
    "fdprof.errors",
    "fdprof.settings",
    "fdprof.files",
    "fdprof.interrupts",
)
#: the one module of each instrumented program that configures the probe for a process, and
#: so may import the SDK: every engine process calls ``sdk.configure`` in ``child_main`` as it
#: starts (after spawn); every vLLM process does in the plugin's entry point
CONFIGURES_THE_PROBE = {ENGINE: "fdprof.engine.process", ADAPTER: "fdprof.adapters.vllm"}
#: the SDK's entry points that fdprof.probe forwards to (for engines that used the old names)
SDK_ENTRY_POINTS = ("configure", "configure_from_env", "shutdown")
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


def sdk_entry_calls(path: Path) -> list[tuple[int, str]]:
    """(line, name) of every SDK entry point reached through the API's forwarders:
    ``probe.configure`` (on a name bound to fdprof.probe) or ``from fdprof.probe import
    configure``, which an import rule alone would take for the API."""
    tree = ast.parse(path.read_text(), str(path))
    aliases = set()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "fdprof" and not node.level:
            aliases |= {a.asname or a.name for a in node.names if a.name == "probe"}
        elif isinstance(node, ast.ImportFrom) and node.module == PROBE:
            found += [(node.lineno, f"{PROBE}.{a.name}") for a in node.names
                      if a.name in SDK_ENTRY_POINTS]  # fmt: skip
        elif isinstance(node, ast.Import):
            aliases |= {a.asname for a in node.names if a.name == PROBE and a.asname}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in SDK_ENTRY_POINTS
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
        ):
            found.append((node.lineno, f"{node.value.id}.{node.attr}"))
    return found


def within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def fdprof_modules() -> list[tuple[Path, str]]:
    return [(p, module_name(p)) for p in sorted(PACKAGE.rglob("*.py"))]


def modules_of(prefix: str) -> list[tuple[Path, str]]:
    found = [(p, m) for p, m in fdprof_modules() if within(m, (prefix,))]
    assert found, f"no module under {prefix}: the rule would read nothing"
    return found


def instrumented_violations(files: list[tuple[Path, str]], program: str) -> list[str]:
    """What the ``(path, module)`` files of instrumented ``program`` import beyond the probe's
    API, the vocabulary and the utilities, and where they reach the SDK outside the one module
    that configures the probe."""
    bad = []
    for path, module in files:
        configures = module == CONFIGURES_THE_PROBE[program]
        for line, name in imports_of(path, module):
            if not within(name, ("fdprof",)) or name == "fdprof":
                continue
            if not within(name, (program, *INSTRUMENTED_MAY_IMPORT)):
                bad.append(f"{module}:{line}: {name}")
            elif within(name, (SDK,)) and not configures:
                bad.append(f"{module}:{line}: {name} (the probe's SDK)")
        if not configures:
            bad += [f"{module}:{line}: {call} (the probe's SDK)" for line, call in
                    sdk_entry_calls(path)]  # fmt: skip
    return bad


@pytest.mark.parametrize("program", [ENGINE, ADAPTER])
def test_instrumented_code_imports_the_probe_api_and_the_vocabulary(program):
    bad = instrumented_violations(modules_of(program), program)
    assert not bad, f"{program} imports beyond the probe's API and the vocabulary:\n" + "\n".join(
        bad
    )


def test_only_the_drivers_import_the_engine():
    bad = [
        f"{p.relative_to(PACKAGE.parent)}:{line}: {name}"
        for p, module in fdprof_modules()
        if not within(module, (ENGINE, *DRIVERS))
        for line, name in imports_of(p, module)
        if within(name, (ENGINE,))
    ]
    assert not bad, "only the CLI, the A/B and the regression suite drive the engine:\n" + (
        "\n".join(bad)
    )


def test_the_probe_api_never_imports_its_sdk():
    """The API (fdprof.probe outside fdprof.probe.sdk) has no import of the SDK but the one
    that fdprof.probe's ``__getattr__`` makes when a user asks for ``probe.configure`` and the
    other SDK entry points by their old names (tests/probe/test_api.py: importing the API loads
    no sink)."""
    api = [(p, m) for p, m in modules_of(PROBE) if not within(m, (SDK,))]
    found = [(m, line, name) for p, m in api for line, name in imports_of(p, m)]
    bad = [f"{m}:{line}: {name}" for m, line, name in found if within(name, (SDK,))]
    assert bad == [f"{PROBE}:{_forwarder_line()}: {SDK}"], "the API imports its SDK:\n" + (
        "\n".join(bad)
    )


def _forwarder_line() -> int:
    path = PACKAGE / "probe" / "__init__.py"
    tree = ast.parse(path.read_text())
    (getattr_def,) = [n for n in tree.body if getattr(n, "name", "") == "__getattr__"]
    return next(line for line, name in imports_of(path, PROBE) if line >= getattr_def.lineno)


def test_the_trace_model_reads_files_not_the_probe():
    bad = [
        f"{m}:{line}: {name}"
        for p, m in modules_of(TRACE)
        for line, name in imports_of(p, m)
        if within(name, (PROBE,))
    ]
    assert not bad, "fdprof.trace imports the probe (use fdprof.formats):\n" + "\n".join(bad)


def test_the_neutral_formats_import_neither_side():
    bad = [
        f"{m}:{line}: {name}"
        for p, m in modules_of("fdprof.formats")
        for line, name in imports_of(p, m)
        if within(name, ("fdprof",))
        and name != "fdprof"
        and not within(name, ("fdprof.formats", "fdprof.semconv", "fdprof.files"))
    ]
    assert not bad, "fdprof.formats imports a side it sits between:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    "source, module, forbidden",
    [
        ("from fdprof.analysis.hazards import find_hazards\n", "fdprof.engine.x",
         "fdprof.analysis.hazards"),
        ("def f():\n    from fdprof import trace\n", "fdprof.engine.x", "fdprof.trace"),
        ("def f():\n    from .. import report\n", "fdprof.engine.x", "fdprof.report"),
        ("from ..ab import arms\n", "fdprof.engine.x", "fdprof.ab.arms"),
        ("import importlib\nimportlib.import_module('fdprof.cli')\n", "fdprof.engine.x",
         "fdprof.cli"),
        ("from fdprof.probe.sdk import recorder\n", "fdprof.engine.x", "fdprof.probe.sdk"),
        ("def f():\n    from ..probe.sdk import otel_export\n", "fdprof.engine.x",
         "fdprof.probe.sdk.otel_export"),
        ("from fdprof import probe\nprobe.configure(None, 'x')\n", "fdprof.engine.x",
         "probe.configure"),
        ("from fdprof import probe as p\np.shutdown()\n", "fdprof.engine.x", "p.shutdown"),
        ("from fdprof.probe import configure_from_env\n", "fdprof.adapters.vllm.hooks",
         "fdprof.probe.configure_from_env"),
        ("from fdprof.probe import sdk\n", "fdprof.adapters.vllm.hooks", "fdprof.probe.sdk"),
    ],
)  # fmt: skip
def test_the_rule_sees_deferred_relative_dynamic_and_forwarded_imports(
    tmp_path, source, module, forbidden
):
    planted = tmp_path / "planted.py"
    planted.write_text(source)
    program = ENGINE if within(module, (ENGINE,)) else ADAPTER
    bad = instrumented_violations([(planted, module)], program)
    assert forbidden in [v.split(": ", 1)[1].split(" (")[0] for v in bad]


def test_the_configuring_module_may_reach_the_sdk(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("from fdprof.probe import sdk\nsdk.configure(None, 'engine')\n")
    assert instrumented_violations([(planted, "fdprof.engine.process")], ENGINE) == []
