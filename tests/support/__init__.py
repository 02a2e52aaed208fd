"""Helpers shared by the test folders of several packages: the factory of small corpora
and checkpoints, real servers (`yunque ui`, `yunque serve`, `mlflow server`) and the
recipes more than one folder's tests build on. Test modules import from here, never from
one another."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # the repository's root
TEST_DATA = REPO / "tests" / "data"  # the stored test data (held-out pages, domain corpora, snapshots)
