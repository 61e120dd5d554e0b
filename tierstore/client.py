"""``from tierstore.client import RemoteStore``: the public name of :mod:`tierstore.remote.client`."""

from tierstore.remote.client import RemoteStore, ServerEmbedder

__all__ = ["RemoteStore", "ServerEmbedder"]
