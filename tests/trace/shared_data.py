"""Where the real third-party traces live: ``../shared/data`` beside the checkout."""

from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
