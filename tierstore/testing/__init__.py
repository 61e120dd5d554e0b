"""Test helpers shipped with tierstore, for backends written outside this package.

``ObjectStoreTests`` is the conformance suite every :class:`~tierstore.objectstore.ObjectStore`
must pass; subclass it and provide a ``store`` fixture. Importing it requires pytest.
"""

from __future__ import annotations

from tierstore.testing.object_store_suite import ObjectStoreTests

__all__ = ["ObjectStoreTests"]
