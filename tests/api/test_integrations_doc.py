"""docs/integrations.md: each python example runs as written and prints what
the page says it prints."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations.md"
TEXT = DOC.read_text()
EXAMPLES = re.findall(r"```python\n(.*?)```\n\nIt prints:\n\n```\n(.*?)```", TEXT, flags=re.S)


def test_the_page_has_both_examples():
    assert len(EXAMPLES) == 2 == len(re.findall(r"```python\n", TEXT))


@pytest.mark.slow
@pytest.mark.parametrize("code, shown", EXAMPLES, ids=["langchain", "langgraph"])
def test_example_runs_and_prints_what_the_page_shows(tmp_path, code, shown):
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == shown.splitlines()
