"""Test helpers shipped with tierstore, for backends written outside this package.

``ObjectStoreTests`` is the conformance suite every :class:`~tierstore.storage.objectstore.ObjectStore`
must pass; subclass it and provide a ``store`` fixture. ``StoreAPITests``
(:mod:`tierstore.testing.api_suite`) is the suite the store API must pass, in
process (:class:`~tierstore.TierStore`) or over HTTP
(:class:`~tierstore.remote.client.RemoteStore`); subclass it and provide an ``api``
fixture. Importing them requires pytest.
"""

from __future__ import annotations

from tierstore.testing.api_suite import StoreAPITests
from tierstore.testing.object_store_suite import ObjectStoreTests

__all__ = ["ObjectStoreTests", "StoreAPITests"]
