"""The whole ``fdprof hazards`` / ``hazards --predict`` command on the realistic trace shape,
side by side with an older fdprof and with RAPID, at several sizes.

The shape (``bench/hazards_shape.py``: lanes, locks, blocks, one access per span, the sync
share as parameters) is written as Chrome JSON to disk once per size, and for RAPID converted
to its STD format (``bench/rapid_std.py``, the same events). Each command then runs in a fresh
process, the tools interleaved size by size, and its CPU time (user + system) and peak resident
memory are read from the kernel (``wait4``): the machine is shared, CPU time is the steadier
figure. Growth is the CPU time's ratio to the previous size's.

- ``new``: this checkout's ``fdprof hazards TRACE --json`` (``--predict`` for WCP);
- ``old``: the same command from another checkout (``--old DIR``, e.g. a worktree of main:
  ``git worktree add /tmp/fdprof-main main``), run by this interpreter;
- RAPID (``--rapid DIR``: a built checkout of github.com/umangm/rapid, ``bin/`` holding its
  classes and ``lib/`` its jars; not fetched or built here): ``java HB`` and ``java WCP`` on the
  STD file.

    python bench/bench_hazards.py --sizes 1e5,1e6,1e7 --old /tmp/fdprof-main --rapid /work/rapid
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from hazards_shape import Shape, generate, write_chrome  # noqa: E402


def run(cmd: list[str], env: dict[str, str] | None, out: Path) -> dict:
    """Run ``cmd`` to the end in ``out``'s folder (not a checkout: ``python -m`` would import
    the fdprof of its working directory); its CPU seconds (user + system), peak RSS (MiB),
    wall seconds and exit status, from ``wait4`` on the child."""
    t0 = time.perf_counter()
    with open(out, "wb") as sink, open(os.devnull, "rb") as nothing:
        proc = subprocess.Popen(cmd, stdin=nothing, stdout=sink, stderr=subprocess.DEVNULL,
                                env=env, cwd=out.parent)  # fmt: skip
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    return {"cpu_s": usage.ru_utime + usage.ru_stime, "peak_mib": usage.ru_maxrss / 1024,
            "wall_s": time.perf_counter() - t0, "rc": proc.returncode}  # fmt: skip


def traces(shape: Shape, cache: Path, rapid: bool) -> tuple[Path, Path | None]:
    """The Chrome trace of ``shape`` (and its STD form), made once into ``cache``."""
    cache.mkdir(parents=True, exist_ok=True)
    chrome, std = cache / f"{shape.name}.json", cache / f"{shape.name}.std"
    if not chrome.exists():
        write_chrome(generate(shape), chrome.with_suffix(".tmp"))
        chrome.with_suffix(".tmp").rename(chrome)
    if rapid and not std.exists():
        subprocess.run([sys.executable, str(ROOT / "bench" / "rapid_std.py"), str(chrome),
                        str(std.with_suffix(".stdtmp"))], check=True)  # fmt: skip
        std.with_suffix(".stdtmp").rename(std)
    return chrome, std if rapid else None


def commands(args, chrome: Path, std: Path | None, predict: bool) -> dict[str, tuple]:
    """tool -> (argv, env) for one trace and analysis."""
    fd = [sys.executable, "-m", "fdprof", "hazards", str(chrome), "--json"]
    fd += ["--predict"] if predict else []
    out: dict[str, tuple] = {"new": (fd, {**os.environ, "PYTHONPATH": str(ROOT)})}
    if args.old:
        out["old"] = (fd, {**os.environ, "PYTHONPATH": str(Path(args.old).resolve())})
    if args.rapid and std is not None:
        rapid = Path(args.rapid)
        cp = ":".join([str(rapid / "bin")] + [str(j) for j in sorted(rapid.glob("lib/**/*.jar"))])
        out["rapid"] = (["java", "-cp", cp, "WCP" if predict else "HB", "-f", "std", "-p",
                         str(std)], None)  # fmt: skip
    return out


def counts(path: Path, tool: str) -> str:
    """What the command found: races (and predicted) for fdprof, racy events for RAPID."""
    text = path.read_text(errors="replace")
    if tool == "rapid":
        line = next((x for x in text.splitlines() if "racy' events" in x), "")
        return line.rsplit("=", 1)[-1].strip() + " racy events"
    try:
        c = json.loads(text)["counts"]
    except (ValueError, KeyError):
        return "?"
    return f"{c['races']} races" + (f", {c['predicted']} predicted" if "predicted" in c else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1e5,1e6,1e7", help="events per trace")
    ap.add_argument("--analyses", default="hb,wcp", help="hb: hazards; wcp: hazards --predict")
    ap.add_argument("--old", help="another fdprof checkout to run side by side (its source)")
    ap.add_argument("--rapid", help="a built RAPID checkout (bin/ and lib/)")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/fdprof-bench-hazards"))
    for name in ("lanes", "locks", "blocks", "seed"):
        ap.add_argument(f"--{name}", type=int, default=Shape.__dataclass_fields__[name].default)
    for name in ("sync_share", "unguarded", "write_share"):
        ap.add_argument(f"--{name.replace('_', '-')}", dest=name, type=float,
                        default=Shape.__dataclass_fields__[name].default)  # fmt: skip
    args = ap.parse_args()
    if args.rapid and not (Path(args.rapid) / "bin" / "HB.class").is_file():
        ap.error(f"--rapid {args.rapid}: no bin/HB.class there (a built RAPID checkout)")
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; shape: "
          f"{args.lanes} lanes, {args.locks} locks, {args.blocks} blocks, sync share "
          f"{args.sync_share}, unguarded {args.unguarded}, writes {args.write_share}")  # fmt: skip
    print(f"{'events':>10} {'analysis':>8} {'tool':>6} {'CPU s':>8} {'peak MiB':>9} "
          f"{'growth':>7} {'wall s':>7}  found")  # fmt: skip
    previous: dict[tuple[str, str], float] = {}
    for size in (int(float(s)) for s in args.sizes.split(",")):
        shape = Shape(size, args.lanes, args.locks, args.blocks, args.sync_share,
                      args.unguarded, args.write_share, args.seed)  # fmt: skip
        chrome, std = traces(shape, args.cache, bool(args.rapid))
        for analysis in args.analyses.split(","):
            row: dict[str, float] = {}
            for tool, (cmd, env) in commands(args, chrome, std, analysis == "wcp").items():
                out = args.cache / f"{shape.name}.{analysis}.{tool}.out"
                r = run(cmd, env, out)
                growth = (f"{r['cpu_s'] / previous[tool, analysis]:.1f}x"
                          if (tool, analysis) in previous else "-")  # fmt: skip
                previous[tool, analysis] = row[tool] = r["cpu_s"]
                print(f"{size:>10,} {analysis:>8} {tool:>6} {r['cpu_s']:>8.1f} "
                      f"{r['peak_mib']:>9.0f} {growth:>7} {r['wall_s']:>7.1f}  "
                      f"{counts(out, tool)} (exit {r['rc']})", flush=True)  # fmt: skip
            ratios = [f"new/{t} {row['new'] / row[t]:.2f}x CPU" for t in ("old", "rapid")
                      if t in row]  # fmt: skip
            if ratios:
                print(f"{'':>10} {analysis:>8} {'':>6} " + ", ".join(ratios), flush=True)


if __name__ == "__main__":
    main()
