"""Numba kernels: pure array functions, installed as ``tierstore.kernels``.

Each kernel takes numpy arrays and scalars and returns arrays (a few documented
ones update columns in place); none touches a Python object, so each can be
tested alone against the plain-Python reference in :mod:`.reference`.

Query-path kernels are serial and release the GIL (``nogil=True``): Numba's
default threading layer aborts when two threads enter a parallel kernel at once.
"""

from . import _cache  # noqa: F401  (first: registers the cache locator before any kernel is defined)
from .codes import (
    code_words,
    hamming_distances,
    hamming_topk,
    int8_codes,
    int8_scores,
    sign_code,
    sign_codes,
    sign_scores,
)
from .columns import (
    ACTION_ARCHIVE,
    ACTION_DELETE,
    ACTION_DEMOTE,
    ACTION_KEEP,
    TIER_COLD,
    TIER_HOT,
    TIER_WARM,
)
from .context import context_multipliers, rescale_lifetimes
from .decay import access_boost, decayed_weight, record_accesses
from .due import classify, due_times
from .flat import flat_topk, inner_products, squared_length, top_candidates
from .rerank import fused_rerank, pack_access, pack_query, rank_and_gather, rank_and_record
from .resolve import resolve_order

__all__ = [
    "ACTION_ARCHIVE",
    "ACTION_DELETE",
    "ACTION_DEMOTE",
    "ACTION_KEEP",
    "TIER_COLD",
    "TIER_HOT",
    "TIER_WARM",
    "access_boost",
    "classify",
    "code_words",
    "context_multipliers",
    "decayed_weight",
    "due_times",
    "flat_topk",
    "fused_rerank",
    "hamming_distances",
    "hamming_topk",
    "pack_access",
    "pack_query",
    "rank_and_gather",
    "rank_and_record",
    "inner_products",
    "int8_codes",
    "int8_scores",
    "record_accesses",
    "rescale_lifetimes",
    "resolve_order",
    "sign_code",
    "sign_codes",
    "sign_scores",
    "squared_length",
    "top_candidates",
]
