"""What ``fdprof diff`` and ``hazards --predict`` cost on a small trace, in process, against
another checkout, side by side (``bench/trees.py``).

A small trace is most of a command's fixed cost: the parser, typed tables, the summaries'
pandas calls. The trace is a twelve-step engine-shaped one (``tests/synthetic.py``'s
``engine_trace``, seeded), written as Chrome JSON once per sample; each command runs through
``fdprof.cli.main`` as a test or a script calling it does, its JSON output digested (the
trees must answer alike).

    python bench/bench_small_trace.py [--against DIR] [--pairs 5] [--calls 40]
"""

from __future__ import annotations

import trees


def sample(calls: int) -> dict:
    """Milliseconds per ``diff`` and per ``hazards --predict`` call of the importable tree."""
    import contextlib
    import hashlib
    import io
    import sys
    import tempfile
    import time
    from pathlib import Path

    sys.path.insert(0, str(trees.ROOT / "tests"))
    from synthetic import engine_trace

    from fdprof.cli import main
    from fdprof.trace import perfetto

    out: dict = {}
    digest = hashlib.sha256()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "small.json"
        perfetto.write(engine_trace(12, mode="lockless", seed=1), path)
        commands = {"diff_ms": ["diff", str(path), str(path), "--json"],
                    "hazards_ms": ["hazards", str(path), "--predict", "--json"]}  # fmt: skip
        for name, argv in commands.items():
            text = io.StringIO()
            with contextlib.redirect_stdout(text), contextlib.redirect_stderr(io.StringIO()):
                main(argv)  # warm-up: imports
                t0 = time.process_time()
                for _ in range(calls):
                    main(argv)
                out[name] = (time.process_time() - t0) / calls * 1e3
            digest.update(text.getvalue().replace(tmp, "<tmp>").encode())
    out["json_sha256"] = digest.hexdigest()
    return out


def main() -> None:
    trees.compare("bench_small_trace", ["diff_ms", "hazards_ms"],
                  trees.arguments(__doc__, "calls", 40))  # fmt: skip


if __name__ == "__main__":
    main()
