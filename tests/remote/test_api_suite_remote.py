"""The store API suite against RemoteStore: a TierStore served over HTTP on a free loopback port."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tierstore import ManualClock, TierStore
from tierstore.remote.client import RemoteStore
from tierstore.remote.server.app import Limits, build_app
from tierstore.remote.server.auth import Principal, TokenTable
from tierstore.testing.api_suite import StoreAPITests
from tierstore.testing.embedders import hash_embed
from tierstore.testing.live_server import ThreadedServer

TOKEN = "suite-token-0123456789abcdef"


class TestRemoteStore(StoreAPITests):
    @pytest.fixture
    def api(self, tmp_path, clock: ManualClock) -> Iterator[RemoteStore]:
        with TierStore.open(tmp_path / "store", embedder=hash_embed, clock=clock) as store:
            # pages of 3: the suite's listings (8 memories) take several round trips
            app = build_app(store, tokens=TokenTable([(TOKEN, Principal("suite"))]), limits=Limits(max_page=3))
            with ThreadedServer(app) as url, RemoteStore(url, token=TOKEN) as remote:
                yield remote


# Every method both have: the same parameters (names, kinds, defaults) and the
# same return annotation.
MIRRORED = [
    "add",
    "get_by_key",
    "add_batch",
    "upsert_batch",
    "search",
    "get",
    "memories",
    "memories_page",
    "touch",
    "feedback",
    "pin",
    "delete",
    "set_context",
    "get_context",
    "namespaces",
    "restore",
    "sweep",
    "stats",
    "metrics_text",
    "now",
    "close",
]


@pytest.mark.parametrize("name", MIRRORED)
def test_remote_store_mirrors_tierstore_signatures(name):
    import inspect

    local, remote = inspect.signature(getattr(TierStore, name)), inspect.signature(getattr(RemoteStore, name))
    shape = lambda sig: [(p.name, p.kind, p.default) for p in sig.parameters.values()]  # noqa: E731
    assert shape(remote) == shape(local)
    assert remote.return_annotation == local.return_annotation
