"""LocalObjectStore: the shared conformance suite plus file-system specific behaviour."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from tierstore.errors import InvalidInputError, ObjectNotFoundError, ObjectStoreError
from tierstore.storage.objectstore import LocalObjectStore, ObjectStore, open_object_store
from tierstore.testing import ObjectStoreTests
from tierstore.testing.object_store_suite import INVALID_KEYS


def _child_env() -> dict[str, str]:
    """Environment for a child interpreter that imports tierstore the way this one did.

    The child gets this process's sys.path (source checkout, rootdir, editable install
    alike), as multiprocessing's spawn does.
    """
    paths = [p or os.getcwd() for p in sys.path]  # "" is the current directory
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


class TestLocalObjectStore(ObjectStoreTests):
    @pytest.fixture
    def store(self, tmp_path: Path) -> LocalObjectStore:
        return LocalObjectStore(tmp_path / "objects")


def _files(root: Path) -> list[str]:
    """Every file and directory under root, relative, sorted (dotfiles included)."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


# -- layout and atomicity --------------------------------------------------------------


def test_objects_are_plain_files(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    store.put("ns/batch-1", b"abc")
    assert (tmp_path / "ns" / "batch-1").read_bytes() == b"abc"
    assert store.root == tmp_path
    assert repr(store) == f"LocalObjectStore(root={str(tmp_path)!r})"


def test_root_is_created_and_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    store = LocalObjectStore("rel/dir")
    assert store.root == tmp_path / "rel" / "dir"
    assert store.root.is_dir()
    monkeypatch.chdir("/")
    store.put("k", b"v")  # still writes under the original directory
    assert (tmp_path / "rel" / "dir" / "k").read_bytes() == b"v"


def test_root_that_is_a_file_fails_clearly(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(ObjectStoreError, match="file"):
        LocalObjectStore(tmp_path / "file")


def test_no_temp_files_left_after_puts(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    for i in range(20):
        store.put(f"a/{i % 3}", bytes([i]) * 100)
        store.put_if_absent(f"b/{i % 4}", bytes([i]) * 100)
    assert not [name for name in _files(tmp_path) if ".tmp-" in name]
    assert store.list() == ["a/0", "a/1", "a/2", "b/0", "b/1", "b/2", "b/3"]


def test_leftover_temp_files_are_ignored(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    store.put("ns/real", b"real")
    # What a crash between mkstemp and rename leaves behind, at the root and nested.
    (tmp_path / ".tmp-abc123").write_bytes(b"partial")
    (tmp_path / "ns" / ".tmp-def456").write_bytes(b"partial")
    (tmp_path / ".hidden-dir").mkdir()
    (tmp_path / ".hidden-dir" / "x").write_bytes(b"")
    (tmp_path / "not a key").write_bytes(b"")  # a stray file get() could never read
    assert store.list() == ["ns/real"]
    assert store.list("ns/") == ["ns/real"]
    with pytest.raises(InvalidInputError):
        store.get("ns/.tmp-def456")
    # A leftover temp file does not block a later put or put_if_absent to that directory.
    assert store.put_if_absent("ns/other", b"o") is True
    assert store.list() == ["ns/other", "ns/real"]


def test_put_replaces_without_partial_state(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    store.put("k", b"old" * 1000)
    inode_before = os.stat(tmp_path / "k").st_ino
    store.put("k", b"new")
    # os.replace swaps in a new file rather than truncating and rewriting the old one.
    assert os.stat(tmp_path / "k").st_ino != inode_before
    assert store.get("k") == b"new"


def test_objects_are_private_files(tmp_path: Path) -> None:
    if os.name == "nt":
        pytest.skip("POSIX permissions")
    store = LocalObjectStore(tmp_path)
    store.put("k", b"v")
    assert store.put_if_absent("j", b"v") is True
    assert (tmp_path / "k").stat().st_mode & 0o077 == 0
    assert (tmp_path / "j").stat().st_mode & 0o077 == 0


def test_deletes_leave_directories_a_put_of_their_key_removes(tmp_path: Path) -> None:
    # A delete leaves the directories it empties (a sweep deletes and writes in the same
    # namespaces' directories every night); a key stored where they are removes them.
    store = LocalObjectStore(tmp_path)
    store.put("a/b/c/d", b"1")
    store.put("a/x", b"2")
    assert store.delete("a/b/c/d") is True
    assert _files(tmp_path) == ["a", "a/b", "a/b/c", "a/x"]
    assert store.list() == ["a/x"]
    store.put("a/b", b"3")  # over the empty a/b/c
    assert store.get("a/b") == b"3" and store.list() == ["a/b", "a/x"]
    assert store.delete("a/x") is True and store.delete("a/b") is True
    assert store.list() == [] and _files(tmp_path) == ["a"]
    assert store.put_if_absent("a", b"4") is True  # over the empty a
    assert store.put_if_absent("a", b"5") is False
    assert store.get("a") == b"4" and _files(tmp_path) == ["a"]
    assert tmp_path.is_dir()  # never the root itself
    store.put("p/q/r", b"6")
    assert store.delete("p/q/r") is True
    store.put("p/q/s", b"7")  # into the directory the delete left
    assert store.list() == ["a", "p/q/s"]
    with pytest.raises(ObjectStoreError, match="'p'"):
        store.put("p", b"8")  # p/q/s is there: a real conflict, nothing removed
    with pytest.raises(ObjectStoreError):
        store.put_if_absent("p", b"8")
    assert store.get("p/q/s") == b"7" and store.list() == ["a", "p/q/s"]
    assert [n for n in _files(tmp_path) if ".tmp-" in n] == []


def test_file_directory_conflict_is_a_clear_error(tmp_path: Path) -> None:
    # S3 can hold both "a" and "a/b"; a directory cannot. Say so instead of failing oddly.
    store = LocalObjectStore(tmp_path)
    store.put("a", b"file")
    with pytest.raises(ObjectStoreError, match="'a/b'"):
        store.put("a/b", b"x")
    with pytest.raises(ObjectStoreError):
        store.put_if_absent("a/b", b"x")
    store.put("d/e", b"x")
    with pytest.raises(ObjectStoreError, match="'d'"):
        store.put("d", b"x")
    with pytest.raises(ObjectStoreError):
        store.put_if_absent("d", b"x")
    assert store.list() == ["a", "d/e"]
    assert store.get("a") == b"file"


def test_long_segment_is_absent_not_an_error(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    key = "x" * 300  # a valid key, but longer than most file systems' NAME_MAX
    assert store.exists(key) is False
    assert store.delete(key) is False
    with pytest.raises(ObjectNotFoundError):
        store.get(key)


# -- keys cannot escape the root ---------------------------------------------------------


@pytest.mark.parametrize("key", INVALID_KEYS + ["../outside/x", "../../etc/x"], ids=lambda k: repr(k)[:40])
def test_keys_cannot_escape_root(tmp_path: Path, key: str) -> None:
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x").write_bytes(b"precious")
    store = LocalObjectStore(root)
    before = _files(tmp_path)
    for call in (
        lambda: store.put(key, b"evil"),
        lambda: store.put_if_absent(key, b"evil"),
        lambda: store.delete(key),
        lambda: store.get(key),
    ):
        with pytest.raises(InvalidInputError):
            call()
    assert _files(tmp_path) == before
    assert (outside / "x").read_bytes() == b"precious"


def test_absolute_key_pointing_outside(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    store = LocalObjectStore(tmp_path / "root")
    target = str(outside / "x")
    with pytest.raises(InvalidInputError, match="absolute"):
        store.put(target, b"evil")
    with pytest.raises(InvalidInputError, match="absolute"):
        store.put_if_absent(target, b"evil")
    assert list(outside.iterdir()) == []
    assert store.list() == []


# -- put_if_absent across processes --------------------------------------------------------

_CHILD = r"""
import json, os, sys, time
from tierstore.storage.objectstore import LocalObjectStore

root, go, name, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
store = LocalObjectStore(root)
print("ready", flush=True)
while not os.path.exists(go):      # start both processes' attempts together
    time.sleep(0.001)
won = [store.put_if_absent(f"race/{i}", (name * 2000).encode()) for i in range(rounds)]
print(json.dumps(won), flush=True)
"""


@pytest.mark.slow
def test_put_if_absent_across_processes(tmp_path: Path) -> None:
    root, go, rounds = tmp_path / "store", tmp_path / "go", 50
    env = _child_env()
    names = ["A", "B"]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(root), str(go), name, str(rounds)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for name in names
    ]
    try:
        for proc in procs:  # both have imported tierstore and are spinning on the go file
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line.strip() == "ready", proc.stderr.read() if proc.stderr else line
        go.write_bytes(b"")
        outputs = [proc.communicate(timeout=60) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for proc, (_out, err) in zip(procs, outputs):
        assert proc.returncode == 0, err
    results = [json.loads(out) for out, _ in outputs]
    store = LocalObjectStore(root)
    for i in range(rounds):
        winners = [name for name, won in zip(names, results) if won[i]]
        assert len(winners) == 1, (i, winners)
        assert store.get(f"race/{i}") == (winners[0] * 2000).encode()
    assert store.list() == [f"race/{i}" for i in sorted(range(rounds), key=str)]
    assert not [p for p in _files(root) if ".tmp-" in p]


# -- open_object_store -----------------------------------------------------------------------


def test_open_plain_path_and_pathlike(tmp_path: Path) -> None:
    a = open_object_store(str(tmp_path / "a"))
    b = open_object_store(tmp_path / "b")
    assert isinstance(a, LocalObjectStore) and a.root == tmp_path / "a"
    assert isinstance(b, LocalObjectStore) and b.root == tmp_path / "b"


def test_open_file_url(tmp_path: Path) -> None:
    store = open_object_store(f"file://{tmp_path}/cold")
    assert isinstance(store, LocalObjectStore)
    assert store.root == tmp_path / "cold"
    store.put("k", b"v")
    assert (tmp_path / "cold" / "k").read_bytes() == b"v"
    spaced = open_object_store(f"file://{tmp_path}/with%20space")
    assert spaced.root == tmp_path / "with space"  # type: ignore[attr-defined]


@pytest.mark.parametrize("url", ["file://remotehost/dir", "file://relative", "file:///dir?x=1"])
def test_open_bad_file_url(url: str) -> None:
    with pytest.raises(InvalidInputError):
        open_object_store(url)


def test_open_passes_store_through(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    assert open_object_store(store) is store

    class Custom:  # any object with the protocol's methods will do
        def put(self, key: str, data: bytes) -> None:
            pass

        def put_if_absent(self, key: str, data: bytes) -> bool:
            return True

        def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
            return b""

        def delete(self, key: str) -> bool:
            return False

        def list(self, prefix: str = "") -> list[str]:
            return []

        def exists(self, key: str) -> bool:
            return False

        def size(self, key: str) -> int:
            return 0

    custom = Custom()
    assert isinstance(custom, ObjectStore)
    assert open_object_store(custom) is custom


def test_open_unknown_scheme_names_it() -> None:
    with pytest.raises(InvalidInputError, match="'gs'"):
        open_object_store("gs://bucket/prefix")
    with pytest.raises(InvalidInputError, match="'ftp'") as info:
        open_object_store("ftp://user:hunter2@host/dir")
    assert "hunter2" not in str(info.value)


@pytest.mark.parametrize("target", [None, 42, b"/tmp/x", "", object()])
def test_open_rejects_non_targets(target: object) -> None:
    with pytest.raises(InvalidInputError):
        open_object_store(target)  # type: ignore[arg-type]


def test_open_local_rejects_s3_options(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="endpoint_url"):
        open_object_store(tmp_path, endpoint_url="http://127.0.0.1:9000")
    with pytest.raises(InvalidInputError, match="region_name"):
        open_object_store(f"file://{tmp_path}", region_name="us-east-1")
    with pytest.raises(InvalidInputError, match="max_attempts"):
        open_object_store(LocalObjectStore(tmp_path), max_attempts=3)


def test_open_does_not_import_boto3_for_local(tmp_path: Path) -> None:
    code = (
        "import sys; from tierstore.storage.objectstore import open_object_store; "
        f"open_object_store({str(tmp_path)!r}).put('k', b'v'); "
        "print('boto3' in sys.modules)"
    )
    env = _child_env()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_thread_safety_smoke(tmp_path: Path) -> None:
    # Many threads writing, deleting and listing distinct and shared keys never crash
    # and leave exactly the expected objects.
    store = LocalObjectStore(tmp_path)

    def work(t: int) -> None:
        for i in range(30):
            store.put(f"t{t}/deep/k{i}", b"x")
            store.put(f"shared/k{i % 5}", bytes([t]))
            if i % 2:
                assert store.delete(f"t{t}/deep/k{i}") is True
            store.list("shared/")

    with ThreadPoolExecutor(6) as pool:
        list(pool.map(work, range(6)))
    expected = [f"t{t}/deep/k{i}" for t in range(6) for i in range(0, 30, 2)]
    expected = sorted(expected + [f"shared/k{i}" for i in range(5)])
    assert store.list() == expected


@pytest.mark.slow
def test_put_races_directory_removal(tmp_path: Path) -> None:
    # One thread stores the key "d/e", which removes the empty directory d/e the others'
    # deletes leave, while they store and delete keys below it: each put ends in its object
    # or in the conflict error (a file or a key in the way at that moment), never in
    # FileNotFoundError or a half-made object, and no temp file is left.
    store = LocalObjectStore(tmp_path)
    stored = {"below": 0, "over": 0, "conflicts": 0}
    lock = threading.Lock()

    def count(name: str) -> None:
        with lock:
            stored[name] += 1

    def below(t: int) -> None:
        for i in range(150):
            try:
                (store.put if i % 2 else store.put_if_absent)(f"d/e/k{t}", b"x")
            except ObjectStoreError:
                count("conflicts")
                continue
            count("below")
            assert store.get(f"d/e/k{t}") == b"x"
            assert store.delete(f"d/e/k{t}") is True

    def over(below_running: list[Future[None]]) -> None:
        # Tries while the others run and, as the scheduler may never give it a free moment on
        # a busy machine, goes on until it has stored "d/e" once after they are done: by then
        # d/e is an empty tree their deletes left, which its put must clear.
        i = 0
        while i < 150 or (i < 100_000 and (any(not f.done() for f in below_running) or stored["over"] == 0)):
            i += 1
            try:
                (store.put if i % 2 else store.put_if_absent)("d/e", b"y")
            except ObjectStoreError:
                count("conflicts")
                continue
            count("over")
            assert store.get("d/e") == b"y"
            assert store.delete("d/e") is True

    with ThreadPoolExecutor(4) as pool:
        below_running = [pool.submit(below, t) for t in range(3)]
        futures = [*below_running, pool.submit(over, below_running)]
        for f in futures:
            f.result()
    assert store.list() == []
    assert stored["below"] > 0 and stored["over"] > 0
    assert [p for p in tmp_path.rglob("*") if p.name.startswith(".tmp-")] == []


def test_ranged_gets_read_exact_bytes_and_stop_at_the_end(tmp_path: Path) -> None:
    # get reads with os.open and pread: every range shape as the buffered read gave it
    store = LocalObjectStore(tmp_path)
    data = bytes(range(256)) * 4096  # 1 MiB
    store.put("a/obj", data)
    assert store.get("a/obj") == data
    assert store.get("a/obj", 1000) == data[1000:]
    assert store.get("a/obj", 5, 7) == data[5:7]
    assert store.get("a/obj", 0, len(data)) == data
    assert store.get("a/obj", len(data) - 3, len(data) + 100) == data[-3:]  # clipped at the end
    assert store.get("a/obj", len(data) + 10, len(data) + 20) == b""  # wholly past the end
    assert store.get("a/obj", len(data) + 10) == b""
    assert store.get("a/obj", 9, 9) == b""
    store.put("empty", b"")
    assert store.get("empty") == b"" and store.get("empty", 0, 10) == b""


def test_get_of_a_directory_or_through_a_file_is_not_found(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    store.put("d/e", b"x")
    with pytest.raises(ObjectNotFoundError):
        store.get("d")  # a directory of other keys, not an object
    with pytest.raises(ObjectNotFoundError):
        store.get("d", 0, 1)
    with pytest.raises(ObjectNotFoundError):
        store.get("d/e/f")  # through a file
    assert store.serial_reads is True  # callers read its objects on one thread (cold_index.fetch_vectors)
