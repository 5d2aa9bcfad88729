"""The dashboards type-check against Grafana's own published dashboard schema.

``@grafana/schema`` (npm, pinned in ``grafana_schema/package.json``) is the schema Grafana's
code is built from, as TypeScript types. Each committed dashboard becomes a typed object literal
(``const d: Dashboard = {...}``), so the compiler rejects a missing required field, a wrong type
and an unknown property. ``make test`` installs the pinned packages when npm is present;
``.ci/run`` installs Node.js from Debian where it is missing.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
PACKAGES = HERE / "grafana_schema" / "node_modules"
TSC = PACKAGES / "typescript" / "bin" / "tsc"
DASHBOARDS = HERE.parents[1] / "dashboards"


#: the fields Grafana's Prometheus plugin reads from an annotation (its AnnotationQueryEditor),
#: which the dashboard schema leaves to the plugins: declared here, everything else strict
PROM_ANNOTATION = """interface PromAnnotation extends AnnotationQuery<DataQuery & { expr: string;
  interval?: string }> {
  step?: string; titleFormat?: string; textFormat?: string; tagKeys?: string;
  useValueForTime?: boolean;
}
"""
_ANNOTATIONS = "__fdprof_annotations__"
#: fields the schema types as a TypeScript enum (parent key, key) → the enum: a string literal
#: never type-checks there, so JSON's string is written as the member with that value (a
#: value no member has stays a string, and fails)
ENUM_FIELDS = {("thresholds", "mode"): "ThresholdsMode", ("color", "mode"): "FieldColorModeId"}
_ENUM_DECLARATIONS = PACKAGES / "@grafana" / "schema" / "dist/types/raw/dashboard/x/types.gen.d.ts"


def _enum_members(enum: str) -> dict[str, str]:
    """Value → ``Enum.Member`` for one enum declared in the schema's types."""
    text = _ENUM_DECLARATIONS.read_text()
    body = re.search(rf"export declare enum {enum} \{{(.*?)\}}", text, re.S).group(1)
    return {value: f"{enum}.{name}" for name, value in re.findall(r'(\w+) = "([^"]*)"', body)}


def _mark_enums(node, parent: str = ""):
    """A copy of ``node`` whose enum-typed strings are marked for :func:`_typed_module`."""
    if isinstance(node, list):
        return [_mark_enums(v, parent) for v in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        enum = ENUM_FIELDS.get((parent, key))
        member = _enum_members(enum).get(value) if enum and isinstance(value, str) else None
        out[key] = f"__enum__{member}" if member else _mark_enums(value, key)
    return out


def _typed_module(dashboard: dict) -> str:
    """The dashboard as a typed literal; its annotations typed apart as Prometheus ones."""
    annotations = dashboard.get("annotations", {}).get("list", [])
    body = {**dashboard, "annotations": {**dashboard.get("annotations", {}), "list": _ANNOTATIONS}}
    literal = json.dumps(_mark_enums(body), indent=1).replace(f'"{_ANNOTATIONS}"', "annotations")
    literal = re.sub(r'"__enum__([\w.]+)"', r"\1", literal)
    enums = ", ".join(sorted(set(ENUM_FIELDS.values())))
    return (
        "import type { AnnotationQuery, Dashboard, DataQuery } from '@grafana/schema';\n"
        f"import {{ {enums} }} from '@grafana/schema';\n\n"
        f"{PROM_ANNOTATION}\n"
        f"const annotations: PromAnnotation[] = {json.dumps(annotations, indent=1)};\n\n"
        f"export const dashboard: Dashboard = {literal};\n"
    )


def _compile(tmp_path: Path, dashboards: dict[str, dict]) -> dict[str, list[str]]:
    """Type-check one module per dashboard; the compiler's errors, by dashboard name."""
    node = shutil.which("node")
    if node is None or not TSC.exists():
        pytest.fail(
            "Node.js and the pinned npm packages are needed: apt-get install nodejs npm, then "
            "make test (it runs npm ci in tests/dashboards/grafana_schema; "
            "as root it installs both: .ci/system-deps)"
        )
    files = []
    for name, dashboard in dashboards.items():
        path = tmp_path / f"{name}.ts"
        path.write_text(_typed_module(dashboard))
        files.append(path.name)
    options = {
        "strict": True,
        "noEmit": True,
        "skipLibCheck": True,
        "target": "es2020",
        "module": "esnext",
        "moduleResolution": "bundler",
        "paths": {"@grafana/schema": [str(PACKAGES / "@grafana" / "schema")]},
    }
    (tmp_path / "tsconfig.json").write_text(
        json.dumps({"compilerOptions": options, "files": files})
    )
    run = subprocess.run(
        [node, str(TSC), "-p", str(tmp_path), "--pretty", "false"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    errors: dict[str, list[str]] = {name: [] for name in dashboards}
    for line in run.stdout.splitlines():
        found = re.match(r"(.+?)\.ts\(\d+,\d+\): error (TS\d+: .*)", line)
        if found:
            errors[Path(found.group(1)).name].append(found.group(2))
        elif line.strip():
            errors.setdefault("(tsc)", []).append(line)
    if run.returncode != 0 and not any(errors.values()):
        pytest.fail(f"tsc failed to run ({run.returncode}): {run.stdout[-2000:]}{run.stderr}")
    return errors


def overview_annotation(committed: dict[str, dict]) -> dict:
    """The engine overview's annotation (the committed dashboards have one)."""
    return next(a for d in committed.values() for a in d["annotations"]["list"])


def test_dashboards_match_grafanas_schema_and_a_broken_one_does_not(tmp_path):
    committed = {p.stem: json.loads(p.read_text()) for p in sorted(DASHBOARDS.glob("*.json"))}
    assert committed, f"no dashboards in {DASHBOARDS}"
    broken = json.loads(json.dumps(next(iter(committed.values()))))
    broken["panels"][0]["gridpos"] = broken["panels"][0].pop("gridPos")  # misspelt field
    broken["links"][0].pop("icon")  # a required field left out
    broken["refresh"] = 30  # a number where the schema wants a string
    broken["annotations"] = {"list": [{**overview_annotation(committed), "titelFormat": "x"}]}
    errors = _compile(tmp_path, {**committed, "broken": broken})
    assert {name: errors[name] for name in committed} == dict.fromkeys(committed, [])
    assert "(tsc)" not in errors
    found = errors["broken"]
    assert len(found) == 4, found
    assert any('"titelFormat"\' does not exist' in e for e in found)
    assert any('"gridpos"\' does not exist' in e for e in found)
    assert any("Property 'icon' is missing" in e for e in found)
    assert any("'number' is not assignable to type 'string'" in e for e in found)
