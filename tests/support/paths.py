"""Where the repo and the shared real-binlog corpus are."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO.parent / "shared" / "binlogs"
