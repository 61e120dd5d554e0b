"""The README's quick start runs as written (issue 14): its python block is
executed in a fresh directory, and prints what the README says it prints."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(), flags=re.S)


def test_the_quick_start_runs_as_written_and_prints_what_the_readme_shows(tmp_path):
    (code,) = _blocks("python")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    shown = re.search(r"It prints:\n\n```\n(.*?)```", README.read_text(), flags=re.S).group(1).splitlines()
    got = out.stdout.splitlines()
    assert len(got) == len(shown)
    for want, line in zip(shown, got):
        prefix = want.split("…")[0]  # the README elides the random id
        assert line.startswith(prefix), (want, line)
    assert (tmp_path / "agent-memory" / "catalog.sqlite").exists()


def test_the_readme_shows_the_two_commands_first():
    first = _blocks("sh")[0]
    assert "make demo" in first and "make test" in first
