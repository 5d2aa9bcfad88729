"""The repository's reference runs (``traces/``), for the tests that read every one of them."""

from pathlib import Path

TRACES = Path(__file__).resolve().parents[1] / "traces"
#: the directories of ``traces/`` that are runs (their ``run.json``): not ``regenerate.py``'s
#: ``__pycache__``, which a test importing it leaves there once the suite writes bytecode
REFERENCE_RUNS = sorted(p for p in TRACES.iterdir() if (p / "run.json").is_file())
