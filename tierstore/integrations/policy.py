"""The policy a framework adapter needs: every item kept under its own id.

LangChain's vector stores and LangGraph's stores promise that what is put
under an id is what is read back under it. Two of tierstore's default
behaviours break that promise and are turned off for the adapters' store:
merging exact duplicates (``dedupe``: a document with another's content would
be stored under the other's id) and automatic supersession (a document very
similar to another would retire it; off by default since issue 27, and
kept off here whatever the default). Query-time resolution, which may place
a newer item before a better-scoring older one, is off too: the frameworks
return results by score. Explicit supersession stays available to code that
calls the store itself.
"""

from __future__ import annotations

from typing import Any

from tierstore.errors import StoreConfigError
from tierstore.policy import Policy


def adapter_policy(**overrides: Any) -> Policy:
    """The default policy with ``dedupe = "off"`` and automatic supersession
    off for every memory type. ``overrides`` are further
    :meth:`Policy.from_dict` keys (``types`` given there are merged over the
    supersession settings)."""
    types = {name: {"supersede_above": "off"} for name in Policy.default().types}
    for name, spec in dict(overrides.pop("types", {})).items():
        types[name] = {**types.get(name, {}), **spec}
    # results in the framework's order (by score): query-time resolution off
    supersession = {
        "resolve_margin": None,
        "resolve_margin_shared_tag": None,
        **dict(overrides.pop("supersession", {})),
    }
    return Policy.from_dict({"dedupe": "off", "types": types, "supersession": supersession, **overrides})


def check_adapter_policy(policy: Policy, what: str, *, served: bool = False) -> None:
    """Raise :class:`StoreConfigError` unless ``policy`` keeps every item
    under its own id (see the module doc); ``what`` names the adapter,
    ``served`` says the store is a server's (the fix is then the server's
    ``--policy``)."""
    fix = (
        "serve the store with that policy: tierstore serve PATH --policy docs/examples/policy-adapters.toml "
        "(the file says adapter_policy() in TOML)"
        if served
        else "open the store with policy=tierstore.integrations.adapter_policy()"
    )
    if policy.dedupe != "off":
        raise StoreConfigError(
            f"the store's policy merges duplicates (dedupe={policy.dedupe!r}): {what} needs every item kept under "
            f"its own id; {fix}"
        )
    auto = sorted(
        name
        for name, t in policy.types.items()
        if t.supersede_above is not None or t.supersede_above_shared_tag is not None
    )
    if auto:
        raise StoreConfigError(
            f"the store's policy supersedes similar memories automatically (types {', '.join(auto)}): {what} "
            f"needs every item kept under its own id; {fix}"
        )
