"""``python -m fdprof.dashboards``: regenerate, check, or verify the dashboards.

python -m fdprof.dashboards                 # rewrite dashboards/*.json
python -m fdprof.dashboards --check         # exit 1 if a committed file is out of date
python -m fdprof.dashboards --verify URL    # run every PromQL query against a Prometheus
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from fdprof import dashboards
from fdprof.dashboards import prometheus_api
from fdprof.errors import FdprofError


def _verify(url: str, minutes: float, window: str) -> int:
    """Print every PromQL query that returns no finite sample over the last minutes."""
    end = time.time()
    empty = 0
    for query in dashboards.promql(window, f"{round(minutes * 60)}s"):
        result = prometheus_api.query_range(url, query.text, end - minutes * 60, end, 5)
        if not prometheus_api.finite_samples(result):
            empty += 1
            print(f"no data: {query}")
    print(f"{empty} of the dashboards' PromQL queries returned no data")
    return 1 if empty else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fdprof.dashboards", description=__doc__)
    parser.add_argument("--dir", type=Path, default=Path("dashboards"), help="output folder")
    parser.add_argument("--check", action="store_true", help="only check the files are current")
    parser.add_argument("--verify", metavar="URL", help="Prometheus base URL to query")
    parser.add_argument("--minutes", type=float, default=15, help="--verify: time range")
    parser.add_argument("--window", default="1m", help="--verify: value of $__rate_interval")
    args = parser.parse_args(argv)
    try:
        if args.verify:
            return _verify(args.verify, args.minutes, args.window)
        if args.check:
            stale = dashboards.stale(args.dir)
            for name in stale:
                print(f"out of date: {args.dir / name} (run python -m fdprof.dashboards)")
            return 1 if stale else 0
        for path in dashboards.write(args.dir):
            print(f"wrote {path}")
        return 0
    except FdprofError as exc:
        print(f"fdprof.dashboards: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
