"""The store API suite against TierStore itself (the reference the remote client must match)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tierstore import ManualClock, TierStore
from tierstore.testing.api_suite import StoreAPITests
from tierstore.testing.embedders import hash_embed


class TestTierStore(StoreAPITests):
    @pytest.fixture
    def api(self, tmp_path, clock: ManualClock) -> Iterator[TierStore]:
        with TierStore.open(tmp_path / "store", embedder=hash_embed, clock=clock) as store:
            yield store
