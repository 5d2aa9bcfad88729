"""Progress with an ETA on a terminal, for work that takes more than a couple of seconds.

Why: loading or converting a large trace takes tens of seconds; a bar that says how far it is
and how long is left beats a silent terminal. tqdm draws it on stderr only when stderr is a
terminal and only once the work has run for :data:`DELAY_S` (quick commands stay quiet, and so
do pipes, files and tests).
"""

from __future__ import annotations

import sys
from typing import Any

from fdprof import settings

#: seconds of work before a bar appears (``FDPROF_PROGRESS_DELAY_S`` overrides it)
DELAY_S = 2.0


def bar(total: int, desc: str, unit: str = "B") -> Any:
    """A tqdm bar over ``total`` units (``update(n)``, ``close()``; a context manager)."""
    from tqdm import tqdm

    delay = settings.progress_delay_s(DELAY_S)
    divisor = 1024 if unit == "B" else 1000
    return tqdm(total=total, desc=desc, unit=unit, unit_scale=True, unit_divisor=divisor,
                delay=delay, disable=None, leave=False, file=sys.stderr,
                dynamic_ncols=True)  # fmt: skip
