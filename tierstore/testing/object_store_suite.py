"""Conformance suite for object stores (after zarr's ``zarr/testing/store.py``).

Each backend's test module is a thin subclass that says how to build an empty store::

    class TestMyStore(ObjectStoreTests):
        @pytest.fixture
        def store(self, tmp_path):
            return MyStore(tmp_path)

Every test checks behaviour that a wrong backend would get wrong.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tierstore.errors import InvalidInputError, ObjectNotFoundError
from tierstore.storage.objectstore import ObjectStore

__all__ = ["ObjectStoreTests", "INVALID_KEYS"]

#: Keys every store must reject before touching storage.
INVALID_KEYS = [
    "",
    "../x",
    "a/../../x",
    "..",
    ".",
    "/abs",
    "/",
    "a//b",
    "a/",
    "a/./b",
    "a/b/..",
    "a\\b",
    "..\\x",
    "a\x00b",
    "a b",
    "a?b",
    "é",
    ".hidden",
    "a/.tmp-x",
    "k" * 1025,
    "/".join(["abcdefg"] * 130),  # 1039 bytes of valid segments: too long as a whole
]


def _blob(n: int, seed: int = 0) -> bytes:
    """n deterministic, non-repeating-looking bytes (so a wrong offset is noticed)."""
    return bytes((i * 131 + seed * 7 + (i >> 8)) & 0xFF for i in range(n))


class ObjectStoreTests:
    """Subclass as ``Test<Backend>`` and provide a ``store`` fixture returning an empty store."""

    #: Keys written by ``test_list_many``: more than S3's 1000-key page by default, so
    #: a backend that forgets to follow pages fails. A subclass may lower it when
    #: pagination is covered elsewhere and writes are slow.
    list_many_count: int = 1100

    @pytest.fixture
    def store(self) -> ObjectStore:
        raise NotImplementedError("subclasses of ObjectStoreTests provide a `store` fixture")

    # -- protocol shape ----------------------------------------------------------------

    def test_implements_protocol(self, store: ObjectStore) -> None:
        assert isinstance(store, ObjectStore)
        assert store.list() == []

    # -- put / get ---------------------------------------------------------------------

    @pytest.mark.parametrize("size", [0, 1, 1000, 1 << 20])
    def test_put_get_roundtrip(self, store: ObjectStore, size: int) -> None:
        data = _blob(size, seed=size)
        store.put("ns/obj", data)
        got = store.get("ns/obj")
        assert isinstance(got, bytes)
        assert got == data
        assert store.size("ns/obj") == size

    def test_put_accepts_bytes_like(self, store: Any) -> None:  # Any: bytes-like data is beyond the protocol's type
        store.put("a", bytearray(b"xyz"))
        store.put("b", memoryview(b"uvw"))
        assert store.get("a") == b"xyz"
        assert store.get("b") == b"uvw"

    def test_put_rejects_non_bytes(self, store: ObjectStore) -> None:
        with pytest.raises(InvalidInputError):
            store.put("a", "text")  # type: ignore[arg-type]
        assert not store.exists("a")

    def test_overwrite(self, store: ObjectStore) -> None:
        store.put("k", b"first version, longer")
        store.put("k", b"second")
        assert store.get("k") == b"second"
        assert store.size("k") == 6
        assert store.list() == ["k"]

    def test_keys_are_distinct(self, store: ObjectStore) -> None:
        keys = ["a", "A", "a.b", "a-b", "a_b", "a=b", "x/a", "x/y/a"]
        for i, key in enumerate(keys):
            store.put(key, str(i).encode())
        for i, key in enumerate(keys):
            assert store.get(key) == str(i).encode(), key

    # -- ranged get --------------------------------------------------------------------

    @pytest.mark.parametrize(
        ("start", "end", "expected"),
        [
            (None, None, slice(None)),
            (10, None, slice(10, None)),  # start only
            (None, 10, slice(0, 10)),  # end only
            (0, 1, slice(0, 1)),
            (100, 250, slice(100, 250)),  # middle
            (999, 1000, slice(999, 1000)),  # last byte
            (990, 5000, slice(990, None)),  # end past the end
            (1000, None, slice(1000, None)),  # start at the end
            (1000, 2000, slice(1000, None)),
            (5000, None, slice(5000, None)),  # start past the end
            (5000, 6000, slice(5000, None)),
            (0, 0, slice(0, 0)),  # empty ranges
            (500, 500, slice(500, 500)),
            (0, None, slice(None)),
        ],
    )
    def test_ranged_get(self, store: ObjectStore, start: int | None, end: int | None, expected: slice) -> None:
        data = _blob(1000, seed=3)
        store.put("r", data)
        assert store.get("r", start, end) == data[expected]

    def test_ranged_get_keywords(self, store: ObjectStore) -> None:
        store.put("r", b"0123456789")
        assert store.get("r", start=2, end=5) == b"234"
        assert store.get("r", end=3) == b"012"
        assert store.get("r", start=7) == b"789"

    def test_ranged_get_of_empty_object(self, store: ObjectStore) -> None:
        store.put("empty", b"")
        assert store.get("empty") == b""
        assert store.get("empty", 0, 10) == b""
        assert store.get("empty", 3) == b""

    @pytest.mark.parametrize(("start", "end"), [(-1, None), (None, -1), (5, 4), (1.0, None), (None, "3"), (True, None)])
    def test_invalid_range_rejected(self, store: ObjectStore, start: object, end: object) -> None:
        store.put("r", b"0123456789")
        with pytest.raises(InvalidInputError):
            store.get("r", start, end)  # type: ignore[arg-type]

    # -- missing keys ------------------------------------------------------------------

    def test_get_missing_raises(self, store: ObjectStore) -> None:
        with pytest.raises(ObjectNotFoundError) as info:
            store.get("nope")
        assert "nope" in str(info.value)
        with pytest.raises(ObjectNotFoundError):
            store.get("nope", 1, 5)
        # ObjectNotFoundError is also a KeyError, so mapping-style callers can catch that.
        with pytest.raises(KeyError):
            store.get("deep/missing/key")

    def test_size_missing_raises(self, store: ObjectStore) -> None:
        with pytest.raises(ObjectNotFoundError) as info:
            store.size("nope")
        assert "nope" in str(info.value)

    def test_missing_under_existing_key(self, store: ObjectStore) -> None:
        # "a" is an object; "a/b" is not, even though its "parent" exists.
        store.put("a", b"x")
        assert not store.exists("a/b")
        with pytest.raises(ObjectNotFoundError):
            store.get("a/b")
        assert store.delete("a/b") is False

    def test_prefix_is_not_an_object(self, store: ObjectStore) -> None:
        store.put("dir/obj", b"x")
        assert not store.exists("dir")
        with pytest.raises(ObjectNotFoundError):
            store.get("dir")
        with pytest.raises(ObjectNotFoundError):
            store.size("dir")
        assert store.delete("dir") is False
        assert store.get("dir/obj") == b"x"

    # -- exists / size -----------------------------------------------------------------

    def test_exists_and_size(self, store: ObjectStore) -> None:
        assert store.exists("e") is False
        store.put("e", b"12345")
        assert store.exists("e") is True
        assert store.size("e") == 5
        store.put("e", b"")
        assert store.exists("e") is True
        assert store.size("e") == 0

    # -- delete ------------------------------------------------------------------------

    def test_delete(self, store: ObjectStore) -> None:
        store.put("d/1", b"one")
        store.put("d/2", b"two")
        assert store.delete("d/1") is True
        assert store.exists("d/1") is False
        with pytest.raises(ObjectNotFoundError):
            store.get("d/1")
        assert store.delete("d/1") is False
        assert store.delete("never-existed") is False
        assert store.list() == ["d/2"]
        assert store.get("d/2") == b"two"

    def test_delete_then_reuse_as_prefix_and_key(self, store: ObjectStore) -> None:
        store.put("p/q/r", b"1")
        assert store.delete("p/q/r") is True
        assert store.list() == []
        store.put("p", b"2")  # "p" was only a prefix; it can become a key
        assert store.get("p") == b"2"

    # -- list --------------------------------------------------------------------------

    def test_list_empty(self, store: ObjectStore) -> None:
        assert store.list() == []
        assert store.list("nothing/") == []

    def test_list_sorted_nested_and_prefixed(self, store: ObjectStore) -> None:
        keys = ["b", "a/2", "a/10", "a/1/x", "a/1/y", "ab", "c/d/e/f", "A"]
        for key in keys:
            store.put(key, key.encode())
        assert store.list() == sorted(keys)
        assert store.list("a/") == ["a/1/x", "a/1/y", "a/10", "a/2"]
        assert store.list("a") == ["a/1/x", "a/1/y", "a/10", "a/2", "ab"]
        assert store.list("a/1") == ["a/1/x", "a/1/y", "a/10"]
        assert store.list("a/1/") == ["a/1/x", "a/1/y"]
        assert store.list("c/d/e/f") == ["c/d/e/f"]
        assert store.list("c/d/e/f/") == []
        assert store.list("zz") == []
        assert store.list("A") == ["A"]

    def test_list_many(self, store: ObjectStore) -> None:
        keys = [f"many/{i:04d}" for i in range(self.list_many_count)]
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda key: store.put(key, b""), keys))
        assert store.list("many/") == keys
        assert store.list("many/00") == keys[:100]
        assert store.list("many/000") == keys[:10]

    @pytest.mark.parametrize("prefix", ["/", "/a", "../", "a//", "a/../", "a\\", "./", ".tmp-"])
    def test_list_invalid_prefix(self, store: ObjectStore, prefix: str) -> None:
        with pytest.raises(InvalidInputError):
            store.list(prefix)

    # -- put_if_absent -----------------------------------------------------------------

    def test_put_if_absent(self, store: ObjectStore) -> None:
        assert store.put_if_absent("once", b"first") is True
        assert store.get("once") == b"first"
        assert store.put_if_absent("once", b"second, longer") is False
        assert store.get("once") == b"first"
        assert store.size("once") == 5
        assert store.list() == ["once"]

    def test_put_if_absent_after_delete(self, store: ObjectStore) -> None:
        assert store.put_if_absent("k", b"1") is True
        assert store.delete("k") is True
        assert store.put_if_absent("k", b"2") is True
        assert store.get("k") == b"2"

    def test_put_if_absent_does_not_clobber_put(self, store: ObjectStore) -> None:
        store.put("k", b"plain put")
        assert store.put_if_absent("k", b"other") is False
        assert store.get("k") == b"plain put"

    def test_put_if_absent_empty_and_large(self, store: ObjectStore) -> None:
        big = _blob(1 << 20, seed=9)
        assert store.put_if_absent("empty", b"") is True
        assert store.put_if_absent("big", big) is True
        assert store.get("empty") == b""
        assert store.get("big") == big

    def test_put_if_absent_threads(self, store: ObjectStore) -> None:
        n = 8
        barrier = threading.Barrier(n)
        payloads = [f"writer-{i}".encode() * 1000 for i in range(n)]

        def attempt(i: int) -> bool:
            barrier.wait()  # release all writers at once to maximise contention
            return store.put_if_absent("contended", payloads[i])

        with ThreadPoolExecutor(n) as pool:
            results = list(pool.map(attempt, range(n)))
        assert results.count(True) == 1, results
        winner = results.index(True)
        assert store.get("contended") == payloads[winner]
        assert store.list() == ["contended"]

    # -- concurrency -------------------------------------------------------------------

    def test_concurrent_puts_and_gets(self, store: ObjectStore) -> None:
        # Readers never see a partial object while writers replace it.
        versions = [bytes([i]) * 65536 for i in range(4)]
        store.put("hot", versions[0])
        errors: list[str] = []

        def writer(i: int) -> None:
            for _ in range(5):
                store.put("hot", versions[i])

        def reader() -> None:
            for _ in range(10):
                data = store.get("hot")
                if data not in versions:
                    errors.append(f"torn read of {len(data)} bytes")

        with ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(writer, i) for i in range(4)]
            futures += [pool.submit(reader) for _ in range(4)]
            for f in futures:
                f.result()
        assert errors == []
        assert store.get("hot") in versions
        assert store.list() == ["hot"]

    # -- key validation ----------------------------------------------------------------

    @pytest.mark.parametrize("key", INVALID_KEYS, ids=lambda k: repr(k)[:40])
    def test_invalid_key_rejected(self, store: ObjectStore, key: str) -> None:
        for call in (
            lambda: store.put(key, b"x"),
            lambda: store.put_if_absent(key, b"x"),
            lambda: store.get(key),
            lambda: store.get(key, 0, 1),
            lambda: store.delete(key),
            lambda: store.exists(key),
            lambda: store.size(key),
        ):
            with pytest.raises(InvalidInputError) as info:
                call()
            # The message names the key (long keys are shown truncated).
            assert repr(key[:20])[1:-1] in str(info.value)
        assert store.list() == []

    @pytest.mark.parametrize("key", [None, 1, b"bytes", ["a"]])
    def test_non_str_key_rejected(self, store: ObjectStore, key: object) -> None:
        with pytest.raises(InvalidInputError):
            store.put(key, b"x")  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError):
            store.get(key)  # type: ignore[arg-type]
        assert store.list() == []

    def test_valid_edge_keys(self, store: ObjectStore) -> None:
        keys = [
            "a",
            "a.",
            "a..b",
            "v=1",
            "-",
            "_",
            "x" * 255,
            "/".join(["abcdefg"] * 128),  # 1023 bytes
        ]
        for key in keys:
            store.put(key, key.encode()[:10])
        for key in keys:
            assert store.get(key) == key.encode()[:10]
        assert store.list() == sorted(keys)

    def test_repr_names_backend(self, store: ObjectStore) -> None:
        text = repr(store)
        assert type(store).__name__ in text
        assert "object at 0x" not in text
