"""What fdprof answers on the reference traces and the real third-party ones: ``hazards
--json``, ``diff --json`` and the Perfetto export, as the commands print and write them.

``expected.json.gz`` holds these answers as the code gave them before the typed trace model
(issue 11), so a redesign of the model is checked to give the same ones. Input paths are
replaced by placeholders (the only volatile part); a Perfetto export is kept as per-phase event
counts and digests of its events in a canonical form (members sorted, numbers exact), since the
files themselves are megabytes. Regenerate only when an answer is meant to change, and say why
in the commit:

    .venv/bin/python tests/golden/answers.py --update
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import sys
import tempfile
from collections import defaultdict
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "traces"
DATA = ROOT / ".." / "shared" / "data"
EXPECTED = Path(__file__).with_name("expected.json.gz")

REFERENCE = ["baseline", "lockless", *sorted(p.name for p in TRACES.glob("fault-*"))]
HTA = ["control.json.gz", "test.json.gz"]
NSYS = [
    "NVIDIA__Fuser__report1.sqlite",
    "YoonKyonghwan__EfficientCenterFormer__baseline.sqlite",
]
#: a range each Nsight export repeats, to diff it by (their own NVTX ranges, no fd.step ids)
NSYS_STEPS = {
    "NVIDIA__Fuser__report1.sqlite": "FusionDefinition::defineRecord",
    "YoonKyonghwan__EfficientCenterFormer__baseline.sqlite": "reader",
}


def cases() -> dict[str, list[str]]:
    """Case name -> the command line (after ``fdprof``); ``{out}`` is a Perfetto output path."""
    out: dict[str, list[str]] = {}
    ref = {name: str(TRACES / name) for name in REFERENCE}
    hta = {name: str(DATA / "hta" / name) for name in HTA}
    nsys = {name: str(DATA / "nsys" / name) for name in NSYS}
    for name, path in ref.items():
        out[f"hazards {name}"] = ["hazards", path, "--json"]
    out["hazards baseline --what-if drop-lock"] = [
        "hazards", ref["baseline"], "--what-if", "drop-lock", "--json",
    ]  # fmt: skip
    for name in REFERENCE[1:]:
        out[f"diff baseline {name}"] = ["diff", ref["baseline"], ref[name], "--json"]
    for name, path in (hta | nsys).items():
        out[f"hazards {name}"] = ["hazards", path, "--json"]
    out["diff hta control test"] = ["diff", *hta.values(), "--step-name", "ProfilerStep#", "--json"]
    out["diff hta control test, no step name"] = ["diff", *hta.values(), "--json"]
    for name, path in nsys.items():
        out[f"diff {name} itself"] = ["diff", path, path, "--step-name", NSYS_STEPS[name], "--json"]
    for name, path in (ref | hta | nsys).items():
        out[f"perfetto {name}"] = ["convert", path, "{out}"]
    return out


def available(argv: list[str]) -> bool:
    """Whether a case's inputs are here (``../shared/data`` lies beside a checkout)."""
    return all(Path(a).exists() for a in argv if a.startswith(("/", ".")) and "{" not in a)


def answer(argv: list[str]) -> dict[str, Any]:
    """Run one case in this process: exit code, stdout (parsed when JSON), stderr lines, and
    for an export the digest of the file written."""
    from fdprof.cli import main

    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "export.json"
        argv = [str(target) if a == "{out}" else a for a in argv]
        stdout, stderr = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            rc = main(argv)
        result: dict[str, Any] = {"rc": rc}
        text = _normalise(stdout.getvalue(), tmp)
        result["stdout"] = json.loads(text) if "--json" in argv and rc in (0, 1) else text
        result["stderr"] = _normalise(stderr.getvalue(), tmp).splitlines()
        if target.exists():
            result["perfetto"] = perfetto_digest(target)
    return result


def _normalise(text: str, tmp: str) -> str:
    for path, name in ((tmp, "<tmp>"), (str(DATA), "<data>"), (str(TRACES), "<traces>")):
        text = text.replace(path, name)
    return text


def _exact(value: Decimal) -> dict[str, str]:
    return {"decimal": str(value)}


def perfetto_digest(path: Path) -> dict[str, dict[str, Any]]:
    """Per event phase: how many events, and a digest of them in canonical form (each event's
    members sorted, numbers exactly as written, events sorted); the ``args`` of slices get a
    digest of their own, so a change there is told apart from one in the slices themselves."""
    doc = json.loads(path.read_text(), parse_float=Decimal)
    lines: dict[str, list[str]] = defaultdict(list)
    for event in doc["traceEvents"]:
        event = dict(event)
        args = event.pop("args", None)
        ph = str(event.get("ph"))
        lines[ph].append(json.dumps(event, sort_keys=True, default=_exact))
        if args is not None:
            lines[f"{ph} args"].append(json.dumps(args, sort_keys=True, default=_exact))
    return {
        ph: {"events": len(texts), "sha256": _digest(texts)} for ph, texts in sorted(lines.items())
    }


def _digest(texts: list[str]) -> str:
    h = hashlib.sha256()
    for text in sorted(texts):
        h.update(text.encode())
        h.update(b"\n")
    return h.hexdigest()


def expected() -> dict[str, Any]:
    with gzip.open(EXPECTED, "rt", encoding="utf-8") as f:
        return json.load(f)


def update() -> None:
    answers = {}
    for name, argv in cases().items():
        if not available(argv):
            raise SystemExit(f"{name}: input missing; the golden answers need every input")
        print(name, file=sys.stderr)
        answers[name] = answer(argv)
    text = json.dumps(answers, indent=0, sort_keys=True)
    with gzip.GzipFile(EXPECTED, "wb", mtime=0) as f:  # mtime 0: same answers, same bytes
        f.write(text.encode())


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        raise SystemExit(__doc__)
    update()
