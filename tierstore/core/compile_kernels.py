"""Compile (or load from Numba's on-disk cache) every kernel at open, with the
exact argument types the engine uses, so that the first query is not a compile."""

from __future__ import annotations

import threading

import numpy as np

from tierstore.kernels import columns as C

_done = False
_lock = threading.Lock()


def warm_up_kernels() -> None:
    global _done
    if _done:
        return
    with _lock:
        if _done:
            return
        from tierstore.kernels import (
            access_boost,
            classify,
            context_multipliers,
            decayed_weight,
            due_times,
            flat_topk,
            fused_rerank,
            hamming_topk,
            inner_products,
            pack_access,
            pack_query,
            rank_and_gather,
            rank_and_record,
            record_accesses,
            rescale_lifetimes,
            sign_code,
            sign_codes,
            sign_scores,
            squared_length,
            top_candidates,
        )

        n = 4
        f = np.ones(n)
        i64 = np.zeros(n, np.int64)
        th = np.array([0.3, 0.1, 0.01, 0.3])
        decayed_weight(f, f, f, 1.0)
        access_boost(f, f, f, f, 1.0)
        due_times(i64, i64, i64, f, f, f, f, f, f, 1.0, th)
        classify(1.0, i64, i64, i64, f, f, f, f, f, f, 1.0, th)
        F = np.ones((C.NF, n), order="F")
        I = np.zeros((C.NI, n), np.int32, order="F")  # noqa: E741 (I: the int32 columns beside F, as in HotTier.I)
        I[C.I_ALIVE] = 1
        tags = np.full((n, 4), -1, np.int32)
        slots = np.arange(n, dtype=np.int64)
        record_accesses(slots[:1], 2.0, F, I, np.ones(1), np.ones(1, np.uint8), np.ones(1, np.uint8), th, np.inf)
        q = np.ones(8, np.float32)
        X = np.ones((n, 8), np.float32)
        squared_length(q)
        sims = inner_products(q, X, n)
        top_candidates(sims, I[C.I_ALIVE], n, 2)
        flat_topk(q, X, n, 2)
        params = np.zeros(C.NP)
        params[C.P_CTX_MAX] = 1.0
        params[C.P_RECENCY_HALF_LIFE] = 1.0
        params[C.P_CONF_HALF_LIFE] = np.inf
        e32 = np.empty(0, np.int32)
        e64 = np.empty(0)
        u8 = np.ones(1, np.uint8)
        w0 = np.ones(1)
        fused_rerank(slots, sims, F, I, tags, params, u8, w0, e32, e32, e64, e32, 2)  # the warm tier
        qf, qi = pack_query(params, w0, e32, e32, e64, e32)
        for a in (qf, qi):  # the hot tier passes a context's read-only arrays
            a.flags.writeable = False
        rank_and_gather(q, slots, sims, F, I, tags, qf, qi, u8, 1.0, 0.0, 2)  # the keyword side's candidates
        access = pack_access(th, np.inf, w0, u8, u8)
        rank_and_record(q, slots, sims, F, I, tags, qf, qi, u8, 1.0, 0.0, 2, -1, access)  # exact hot
        # hnswlib hands back uint64 labels and float32 distances, (1, m) for one query
        labels = slots.astype(np.uint64)[None]
        rank_and_record(q, labels, sims[None], F, I, tags, qf, qi, u8, 1.0, 0.0, 2, -1, access)
        context_multipliers(tags, n, e32, e64)
        rescale_lifetimes(f, f, f, f, f, f, 1.0)
        codes = sign_codes(X)  # the cold index
        rows, _ = hamming_topk(sign_code(q), codes, 2, np.empty(0, np.int8))
        sign_scores(q, codes, rows)
        _done = True
