"""The ``tierstore`` command's own surface: every option explained, options
only where they mean something, errors in the command's words, and a store
that is taken said before a model is loaded."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest

from tierstore import TierStore
from tierstore.errors import StoreConfigError
from tierstore.tools.cli import build_parser, in_cli_words, main

DIM = 8


def _options(parser: argparse.ArgumentParser, name: str = "tierstore"):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, subparser in action.choices.items():
                yield from _options(subparser, f"{name} {sub}")
        else:
            yield name, action


def test_every_option_says_what_it_does():
    missing = [
        f"{name} {action.option_strings or action.dest}" for name, action in _options(build_parser()) if not action.help
    ]
    assert missing == []


@pytest.mark.parametrize("command", ["stats", "verify", "report"])
@pytest.mark.parametrize("option", [["--now", "2026-01-01"], ["--allow-clock-jump"]])
def test_read_only_commands_take_no_clock_options(tmp_path, capsys, command, option):
    TierStore.open(tmp_path / "s", dim=DIM).close()
    extra = ["--out", str(tmp_path / "r")] if command == "report" else []
    with pytest.raises(SystemExit) as exit_:
        main([command, str(tmp_path / "s"), *extra, *option])
    assert exit_.value.code == 2 and f"unrecognized arguments: {option[0]}" in capsys.readouterr().err


def test_the_commands_that_change_the_store_keep_them(tmp_path, capsys):
    TierStore.open(tmp_path / "s", dim=DIM).close()
    assert main(["sweep", str(tmp_path / "s"), "--now", "2026-01-01", "--allow-clock-jump", "--json"]) == 0
    assert main(["restore", str(tmp_path / "s"), "--ns", "n", "--text", "x", "--now", "2026-01-01", "--json"]) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit):  # restore does not sweep
        main(["restore", str(tmp_path / "s"), "--ns", "n", "--allow-clock-jump"])


@pytest.mark.parametrize(
    "args, said",
    [
        (["sweep", "{p}/new"], "there is no tierstore store at {p}/new\n"),
        (["rebuild-catalog", "{p}/new"], "there is no tierstore store at {p}/new (to create one, give --dim N)\n"),
        (
            ["serve", "{p}/new", "--insecure-no-auth", "--port", "0"],
            "there is no tierstore store at {p}/new (to create one, give --dim N or --embedder NAME)\n",
        ),
        (
            ["serve", "{p}/s", "--dim", "16", "--insecure-no-auth", "--port", "0"],
            "the store at {p}/s has dimension 8, opened with --dim 16\n",
        ),
    ],
)
def test_errors_name_the_commands_options(tmp_path, capsys, args, said):
    pytest.importorskip("uvicorn")
    TierStore.open(tmp_path / "s", dim=DIM).close()
    assert main([a.format(p=tmp_path) for a in args]) == 2
    err = capsys.readouterr().err
    assert err == f"tierstore {args[0]}: " + said.format(p=tmp_path)
    assert not (tmp_path / "new").exists()


def test_library_spellings_become_options():
    assert (
        in_cli_words("x (to create one, give dim=)", "mcp")
        == "x (to create one, give --embedder NAME, and --dim N if it is not the embedder's)"
    )
    assert (
        in_cli_words("dim=384 but the embedder 'minilm' makes vectors of dimension 384", "serve")
        == "--dim 384 but the embedder 'minilm' makes vectors of dimension 384"
    )
    assert (
        in_cli_words("the trace t has no add to take the dimension from: pass dim=", "simulate")
        == "the trace t has no add to take the dimension from: pass --dim N"
    )
    assert (
        in_cli_words("this store has no embedder (open it with embedder=...); give", "mcp")
        == "this store has no embedder (open it with --embedder NAME); give"
    )
    assert in_cli_words("tags=['a'] dimension", "serve") == "tags=['a'] dimension"  # only the known spellings


def test_a_taken_store_is_said_before_a_model_loads(tmp_path, monkeypatch):
    """A second server on a store learns that it is taken at once, not after
    loading its embedding model (seconds): the lock is checked first."""
    from tierstore import embedding

    def no_model(spec):
        raise AssertionError(f"the model {spec!r} was loaded before the lock was checked")

    with TierStore.open(tmp_path / "s", dim=DIM):
        monkeypatch.setattr(embedding, "resolve", no_model)
        with pytest.raises(StoreConfigError, match="already open in this process"):
            TierStore.open(tmp_path / "s", embedder="minilm")
        # from another process, through the CLI: the store's holder is named (the embed extra, which this
        # environment may lack, is never reached)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p or os.getcwd() for p in sys.path)}
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "tierstore.tools.cli",
                "serve",
                str(tmp_path / "s"),
                "--embedder",
                "minilm",
                "--insecure-no-auth",
                "--port",
                "0",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            cwd=tmp_path,
        )
    assert done.returncode == 2
    assert f"is open in process {os.getpid()}" in done.stderr and "extra" not in done.stderr
