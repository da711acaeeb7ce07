"""Where the test suite's files are, for tests in any room of the tree."""

from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parents[1]
ROOT = TESTS_DIR.parent
QA_FIXTURES = TESTS_DIR / "fixtures" / "qa"
