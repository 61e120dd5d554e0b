"""S3ObjectStore against moto's standalone server: the conformance suite plus S3 specifics."""

from __future__ import annotations

import re
import sys
import traceback
import uuid
from typing import Any

import pytest

pytest.importorskip("boto3")

from s3_fixtures import MotoServer  # noqa: E402

from tierstore.errors import (  # noqa: E402
    InvalidInputError,
    MissingDependencyError,
    ObjectNotFoundError,
    ObjectStoreError,
)
from tierstore.storage.objectstore import S3ObjectStore, open_object_store  # noqa: E402
from tierstore.testing import ObjectStoreTests  # noqa: E402

SECRET = "SECRET-SHOULD-NOT-LEAK"


def _store(server: MotoServer, bucket: str, prefix: str = "", **kwargs: Any) -> S3ObjectStore:
    # Short timeouts and few retries: a broken server should fail a test fast.
    kwargs.setdefault("connect_timeout", 2.0)
    kwargs.setdefault("read_timeout", 10.0)
    kwargs.setdefault("max_attempts", 2)
    return S3ObjectStore(bucket, prefix, endpoint_url=server.endpoint_url, **kwargs)


@pytest.fixture(scope="session")
def s3_client(moto_server: MotoServer) -> Any:
    """One client, built by S3ObjectStore itself, shared by the suite's stores.

    Building a boto3 client costs ~100 ms (endpoint rules are parsed per session);
    sharing one keeps the suite fast. Client construction is tested on its own below.
    """
    return _store(moto_server, "unused-bucket").client


class TestS3ObjectStore(ObjectStoreTests):
    # Real 1000-key pages would cost seconds of PUTs against moto; the pagination loop
    # is checked with small pages in test_list_follows_pages instead.
    list_many_count = 150

    @pytest.fixture
    def store(self, s3_client: Any, s3_bucket: str) -> S3ObjectStore:
        return S3ObjectStore(s3_bucket, "suite", client=s3_client)

    def test_concurrent_puts_and_gets(self, store: S3ObjectStore) -> None:
        # Overrides the suite's same-key version: moto's server (unlike S3) can
        # cut a GET body while the key is being replaced, and tierstore never
        # overwrites an object (archives are put_if_absent). What matters here
        # is that one client serves eight threads: each writer owns its keys.
        from concurrent.futures import ThreadPoolExecutor

        def writer(i: int) -> None:
            for j in range(5):
                data = bytes([i, j]) * 32768
                store.put(f"w{i}/{j}", data)
                assert store.get(f"w{i}/{j}") == data

        def reader(i: int) -> None:
            for j in range(5):
                if store.exists(f"w{i}/{j}"):
                    assert store.get(f"w{i}/{j}") == bytes([i, j]) * 32768

        with ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(writer, i) for i in range(4)] + [pool.submit(reader, i) for i in range(4)]
            for f in futures:
                f.result()
        assert store.list() == sorted(f"w{i}/{j}" for i in range(4) for j in range(5))


def test_no_prefix_uses_bucket_top_level(s3_client: Any, moto_server: MotoServer, s3_bucket: str) -> None:
    # The suite runs with a prefix; this is the prefix-less path through every method.
    store = S3ObjectStore(s3_bucket, "", client=s3_client)
    assert store.prefix == ""
    store.put("a/b", b"0123456789")
    assert store.put_if_absent("c", b"c") is True
    assert store.put_if_absent("c", b"x") is False
    raw = moto_server.client().get_object(Bucket=s3_bucket, Key="a/b")
    assert raw["Body"].read() == b"0123456789"
    assert store.get("a/b", 2, 5) == b"234"
    assert store.list() == ["a/b", "c"]
    assert store.list("a/") == ["a/b"]
    assert store.exists("a/b") and store.size("a/b") == 10
    assert store.delete("a/b") is True and store.delete("a/b") is False
    with pytest.raises(ObjectNotFoundError):
        store.get("a/b")
    assert store.list() == ["c"]


# -- layout ---------------------------------------------------------------------------------


def test_keys_are_stored_under_prefix(moto_server: MotoServer, s3_bucket: str) -> None:
    store = _store(moto_server, s3_bucket, "/tenant/cold/")  # slashes are normalised
    assert store.prefix == "tenant/cold"
    store.put("ns/batch-1", b"abc")
    raw = moto_server.client().get_object(Bucket=s3_bucket, Key="tenant/cold/ns/batch-1")
    assert raw["Body"].read() == b"abc"
    assert store.list() == ["ns/batch-1"]


def test_prefix_isolation(moto_server: MotoServer, s3_bucket: str) -> None:
    # "tenant" and "tenant2" share a string prefix: the store prefix must end at a "/".
    a = _store(moto_server, s3_bucket, "tenant")
    b = _store(moto_server, s3_bucket, "tenant2")
    root = _store(moto_server, s3_bucket)
    a.put("k", b"from a")
    b.put("k", b"from b")
    b.put("only-b", b"b")
    assert a.list() == ["k"]
    assert b.list() == ["k", "only-b"]
    assert a.get("k") == b"from a"
    assert b.get("k") == b"from b"
    assert a.exists("only-b") is False
    assert a.delete("only-b") is False
    assert b.exists("only-b") is True
    assert a.put_if_absent("only-b", b"a") is True  # a's "only-b" is a different object
    assert b.get("only-b") == b"b"
    assert root.list() == ["tenant/k", "tenant/only-b", "tenant2/k", "tenant2/only-b"]


def test_list_skips_objects_with_invalid_names(moto_server: MotoServer, s3_bucket: str) -> None:
    client = moto_server.client()
    client.put_object(Bucket=s3_bucket, Key="p/has space", Body=b"")
    client.put_object(Bucket=s3_bucket, Key="p/a//b", Body=b"")
    store = _store(moto_server, s3_bucket, "p")
    store.put("ok", b"")
    assert store.list() == ["ok"]


def test_list_follows_pages(moto_server: MotoServer, s3_bucket: str) -> None:
    store = _store(moto_server, s3_bucket, "pg")
    for i in range(7):
        store.put(f"k{i}", b"")
    calls: list[dict[str, Any]] = []

    def small_pages(params: dict[str, Any], **_: Any) -> None:
        params["MaxKeys"] = 2  # force 4 pages for 7 keys
        calls.append(dict(params))

    store.client.meta.events.register("provide-client-params.s3.ListObjectsV2", small_pages)
    assert store.list() == [f"k{i}" for i in range(7)]
    assert len(calls) == 4


# -- conditional put --------------------------------------------------------------------------


def test_put_if_absent_sends_if_none_match(moto_server: MotoServer, s3_bucket: str) -> None:
    store = _store(moto_server, s3_bucket)
    seen: list[Any] = []
    store.client.meta.events.register(
        "before-send.s3.PutObject",
        lambda request, **_: seen.append(request.headers.get("If-None-Match")),
    )
    assert store.put_if_absent("k", b"1") is True
    assert store.put_if_absent("k", b"2") is False
    store.put("k", b"3")
    decoded = [v.decode() if isinstance(v, bytes) else v for v in seen]
    assert decoded == ["*", "*", None]
    assert store.get("k") == b"3"


def _stubbed(responses: list[tuple[str, dict[str, Any]]]) -> tuple[S3ObjectStore, Any]:
    """An S3ObjectStore on a botocore Stubber client: no network, scripted answers."""
    import boto3
    from botocore.stub import Stubber

    client = boto3.session.Session().client(
        "s3", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y"
    )
    stubber = Stubber(client)
    for kind, spec in responses:
        if kind == "error":
            stubber.add_client_error("put_object", **spec)
        else:
            stubber.add_response("put_object", {"ETag": '"e"'})
    stubber.activate()
    return S3ObjectStore("bucket", "p", client=client), stubber


def test_put_if_absent_retries_409_conflict(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tierstore.storage.objectstore._s3._CONFLICT_BACKOFF_S", 0.0)
    conflict = {"service_error_code": "ConditionalRequestConflict", "http_status_code": 409}
    store, stubber = _stubbed([("error", conflict), ("error", conflict), ("ok", {})])
    assert store.put_if_absent("k", b"v") is True
    stubber.assert_no_pending_responses()


def test_put_if_absent_412_after_409_is_false(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tierstore.storage.objectstore._s3._CONFLICT_BACKOFF_S", 0.0)
    conflict = {"service_error_code": "ConditionalRequestConflict", "http_status_code": 409}
    failed = {"service_error_code": "PreconditionFailed", "http_status_code": 412}
    store, stubber = _stubbed([("error", conflict), ("error", failed)])
    assert store.put_if_absent("k", b"v") is False
    stubber.assert_no_pending_responses()


@pytest.mark.slow
def test_put_if_absent_persistent_409_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tierstore.storage.objectstore._s3._CONFLICT_BACKOFF_S", 0.0)
    conflict = {"service_error_code": "ConditionalRequestConflict", "http_status_code": 409}
    store, _ = _stubbed([("error", conflict)] * 5)
    with pytest.raises(ObjectStoreError, match="ConditionalRequestConflict") as info:
        store.put_if_absent("k", b"v")
    assert "'k'" in str(info.value)
    assert not isinstance(info.value, ObjectNotFoundError)


def test_put_if_absent_unsupported_is_an_error() -> None:
    # A server without conditional writes must not be mistaken for "already exists".
    unsupported = {"service_error_code": "NotImplemented", "http_status_code": 501}
    store, _ = _stubbed([("error", unsupported)])
    with pytest.raises(ObjectStoreError, match="NotImplemented"):
        store.put_if_absent("k", b"v")


# -- ranged get -------------------------------------------------------------------------------


def test_ranged_get_uses_range_header(moto_server: MotoServer, s3_bucket: str) -> None:
    store = _store(moto_server, s3_bucket)
    store.put("r", bytes(range(100)))
    ranges: list[Any] = []
    store.client.meta.events.register(
        "before-send.s3.GetObject", lambda request, **_: ranges.append(request.headers.get("Range"))
    )
    assert store.get("r", 10, 20) == bytes(range(10, 20))
    assert store.get("r", 90) == bytes(range(90, 100))
    assert store.get("r", None, 5) == bytes(range(5))
    assert store.get("r") == bytes(range(100))
    assert store.get("r", 7, 7) == b""  # no request at all
    decoded = [r.decode() if isinstance(r, bytes) else r for r in ranges]
    assert decoded == ["bytes=10-19", "bytes=90-", "bytes=0-4", None]


class _FailingBody:
    """A response body that breaks mid-stream, as a reset connection does."""

    def __init__(self) -> None:
        self.closed = False

    def read(self, *args: Any) -> bytes:
        from botocore.exceptions import ResponseStreamingError

        raise ResponseStreamingError(error="Connection broken: IncompleteRead")

    def close(self) -> None:
        self.closed = True


def _stubbed_gets(bodies: list[Any], max_attempts: int = 3) -> tuple[S3ObjectStore, Any]:
    import io

    import boto3
    from botocore.response import StreamingBody
    from botocore.stub import Stubber

    client = boto3.session.Session().client(
        "s3", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y"
    )
    stubber = Stubber(client)
    for body in bodies:
        if isinstance(body, bytes):
            body = StreamingBody(io.BytesIO(body), len(body))
        stubber.add_response("get_object", {"Body": body})
    stubber.activate()
    return S3ObjectStore("bucket", client=client, max_attempts=max_attempts), stubber


def test_get_retries_a_body_cut_short() -> None:
    broken = _FailingBody()
    store, stubber = _stubbed_gets([broken, b"whole object"])
    assert store.get("k") == b"whole object"
    assert broken.closed
    stubber.assert_no_pending_responses()


def test_get_gives_up_after_max_attempts() -> None:
    store, stubber = _stubbed_gets([_FailingBody(), _FailingBody()], max_attempts=2)
    with pytest.raises(ObjectStoreError, match="ResponseStreamingError") as info:
        store.get("k")
    assert "'k'" in str(info.value)
    stubber.assert_no_pending_responses()


# -- errors and secrets -----------------------------------------------------------------------


def test_missing_bucket_is_a_store_error_not_not_found(moto_server: MotoServer) -> None:
    store = _store(moto_server, f"missing-{uuid.uuid4().hex[:12]}")
    with pytest.raises(ObjectStoreError) as info:
        store.get("k")
    assert not isinstance(info.value, ObjectNotFoundError)
    assert "NoSuchBucket" in str(info.value)
    assert "get" in str(info.value) and "'k'" in str(info.value)


def test_secrets_never_leak(moto_server: MotoServer) -> None:
    store = S3ObjectStore(
        f"missing-{uuid.uuid4().hex[:12]}",
        "pfx",
        endpoint_url=moto_server.endpoint_url,
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key=SECRET,
        max_attempts=1,
    )
    assert SECRET not in repr(store)
    assert SECRET not in str(store)
    assert repr(store) == (
        f"S3ObjectStore(bucket={store.bucket!r}, prefix='pfx', endpoint_url={moto_server.endpoint_url!r})"
    )
    assert SECRET not in repr(vars(store))
    # The credentials did reach the client: requests are signed with them.
    creds = store.client._request_signer._credentials  # botocore internals, test only
    assert creds.secret_key == SECRET
    for call in (lambda: store.get("k"), lambda: store.put("k", b"v"), lambda: store.list()):
        with pytest.raises(ObjectStoreError) as info:
            call()
        text = "".join(traceback.format_exception(info.value))  # includes the chained cause
        assert SECRET not in text
        assert SECRET not in repr(info.value)


def test_endpoint_user_info_is_not_shown() -> None:
    store = S3ObjectStore("bucket", endpoint_url="http://user:pa55word@127.0.0.1:1/path?token=t0ken", max_attempts=1)
    assert "pa55word" not in repr(store) and "t0ken" not in repr(store)
    assert "127.0.0.1:1" in repr(store)


def test_unreachable_endpoint_raises_store_error() -> None:
    # Port 1 on loopback refuses connections: fails fast, without hanging on retries.
    store = S3ObjectStore(
        "bucket",
        endpoint_url="http://127.0.0.1:1",
        connect_timeout=0.5,
        max_attempts=1,
        aws_secret_access_key=SECRET,
        aws_access_key_id="AKIDEXAMPLE",
    )
    with pytest.raises(ObjectStoreError) as info:
        store.get("some/key")
    assert "'some/key'" in str(info.value)
    assert SECRET not in "".join(traceback.format_exception(info.value))


# -- configuration ------------------------------------------------------------------------------


def test_timeouts_and_retries_are_applied(moto_server: MotoServer) -> None:
    store = S3ObjectStore(
        "bucket",
        endpoint_url=moto_server.endpoint_url,
        region_name="eu-west-3",
        connect_timeout=1.5,
        read_timeout=7.0,
        max_attempts=3,
    )
    config = store.client.meta.config
    assert config.connect_timeout == 1.5
    assert config.read_timeout == 7.0
    # max_attempts counts every try: 3 means the first request and up to 2 retries.
    assert config.retries == {"total_max_attempts": 3, "mode": "standard"}
    assert store.client.meta.region_name == "eu-west-3"
    assert store.client.meta.endpoint_url == moto_server.endpoint_url


def test_user_config_is_merged(moto_server: MotoServer) -> None:
    from botocore.config import Config

    store = S3ObjectStore(
        "bucket",
        endpoint_url=moto_server.endpoint_url,
        read_timeout=9.0,
        config=Config(max_pool_connections=3, s3={"addressing_style": "path"}),
    )
    config = store.client.meta.config
    assert config.max_pool_connections == 3
    assert config.read_timeout == 9.0
    assert config.retries["mode"] == "standard"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"bucket": ""},
        {"bucket": "a/b"},
        {"bucket": "x"},
        {"prefix": "a/../b"},
        {"prefix": "a//b"},
        {"connect_timeout": 0},
        {"read_timeout": -1},
        {"max_attempts": 0},
        {"max_attempts": 2.5},
    ],
)
def test_invalid_arguments(kwargs: dict[str, Any]) -> None:
    args = {"bucket": "bucket", **kwargs}
    with pytest.raises(InvalidInputError):
        S3ObjectStore(**args)


def test_unknown_client_option_names_it_without_value() -> None:
    with pytest.raises(InvalidInputError, match="no_such_option") as info:
        S3ObjectStore("bucket", no_such_option=SECRET)
    assert SECRET not in str(info.value)


def test_missing_boto3(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "boto3", None)  # makes `import boto3` raise ImportError
    with pytest.raises(MissingDependencyError, match=re.escape("pip install '.[s3]' in a clone of tierstore")):
        S3ObjectStore("bucket")
    with pytest.raises(MissingDependencyError, match=re.escape("pip install '.[s3]' in a clone of tierstore")):
        open_object_store("s3://bucket/prefix")
    with pytest.raises(ImportError):  # also catchable as the ImportError it is
        S3ObjectStore("bucket")


# -- open_object_store -------------------------------------------------------------------------


def test_open_s3_url(moto_server: MotoServer, s3_bucket: str) -> None:
    store = open_object_store(f"s3://{s3_bucket}/pfx/sub", endpoint_url=moto_server.endpoint_url, max_attempts=2)
    assert isinstance(store, S3ObjectStore)
    assert (store.bucket, store.prefix) == (s3_bucket, "pfx/sub")
    assert store.client.meta.config.retries["total_max_attempts"] == 2
    store.put("k", b"v")
    raw = moto_server.client().get_object(Bucket=s3_bucket, Key="pfx/sub/k")
    assert raw["Body"].read() == b"v"
    bare = open_object_store(f"s3://{s3_bucket}", endpoint_url=moto_server.endpoint_url)
    assert bare.prefix == ""  # type: ignore[attr-defined]
    assert bare.list() == ["pfx/sub/k"]


@pytest.mark.parametrize("url", ["s3://", "s3:///prefix", "s3://bucket/p?x=1", "s3://bucket/a/../b"])
def test_open_bad_s3_url(url: str) -> None:
    with pytest.raises(InvalidInputError):
        open_object_store(url)


def test_open_s3_url_with_credentials_is_refused() -> None:
    with pytest.raises(InvalidInputError) as info:
        open_object_store(f"s3://AKID:{SECRET}@bucket/p")
    assert SECRET not in str(info.value)


def test_passed_client_is_used(moto_server: MotoServer, s3_bucket: str) -> None:
    client = moto_server.client()
    store = S3ObjectStore(s3_bucket, "c", client=client)
    assert store.client is client
    assert moto_server.endpoint_url in repr(store)
    store.put("k", b"v")
    assert store.get("k") == b"v"
    with pytest.raises(InvalidInputError):
        S3ObjectStore(s3_bucket, client=client, aws_secret_access_key=SECRET)


# -- server faults (the fixture's stop/start) -------------------------------------------------


@pytest.mark.slow
def test_server_down_then_back(moto_server: MotoServer, s3_bucket: str) -> None:
    store = _store(moto_server, s3_bucket, connect_timeout=0.5, max_attempts=1)
    store.put("k", b"v")
    moto_server.stop()
    try:
        assert not moto_server.running
        with pytest.raises(ObjectStoreError) as info:
            store.get("k")
        assert not isinstance(info.value, ObjectNotFoundError)
    finally:
        moto_server.start()
    # moto keeps state in memory: the bucket is gone after a restart, and the same
    # store object (same client, same port) reconnects.
    moto_server.client().create_bucket(Bucket=s3_bucket)
    assert store.exists("k") is False
    store.put("k", b"again")
    assert store.get("k") == b"again"
