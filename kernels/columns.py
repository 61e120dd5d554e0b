"""Column layout shared by the hot tier and the kernels.

A namespace's metadata is two 2-D arrays: ``F`` (float64, shape ``(NF,
capacity)``) and ``I`` (int32, shape ``(NI, capacity)``: small integers and
flags, an access count below 2**31); each row is one column. The hot tier
keeps them in Fortran order (a slot's fields adjacent: a candidate's read
touches two cache lines). Times are POSIX seconds; ``+inf`` means "never".
"""

# float64 rows of F
F_CREATED = 0  # created_at
F_LAST_ACCESS = 1  # last_accessed_at
F_W_REF = 2  # weight at t_ref
F_T_REF = 3  # reference time of the weight
F_HALF_LIFE = 4  # effective half-life (seconds; confidence and context applied)
F_CONF = 5  # fused confidence at t_conf, [0, 1]
F_T_CONF = 6  # last reinforcement of the confidence
F_TTL = 7  # effective TTL (seconds, +inf: none)
F_TTL_ANCHOR = 8  # the TTL runs from here (creation, last access or restore)
F_DUE = 9  # next time the migrator must look at this memory (+inf: never)
F_CTX_MULT = 10  # context TTL multiplier currently applied
F_CONF_LLM = 11  # confidence signals (NaN: absent); read by feedback, not kernels
F_CONF_RULE = 12
F_CONF_FEEDBACK = 13
F_TTL_OVERRIDE = 14  # per-memory TTL (NaN: the type's)
NF = 15

# int64 rows of I
I_TYPE = 0  # index into Policy.type_names
I_ACCESS_COUNT = 1
I_PINNED = 2  # 1: exempt from every expiry
I_ALIVE = 3  # 0: deleted or moved out (slot kept until compaction)
I_DIRTY = 4  # 1: changed since the last flush to the catalog
I_FLUSHED_COUNT = 5  # access count as of the last flush (the difference goes to the access log)
NI = 6

TIER_HOT = 0
TIER_WARM = 1
TIER_COLD = 2

ACTION_KEEP = 0
ACTION_DEMOTE = 1
ACTION_ARCHIVE = 2
ACTION_DELETE = 3

# indices into the rerank parameter vector
P_NOW = 0
P_CONF_HALF_LIFE = 1  # +inf: confidence does not decay
P_MIN_CONF = 2
P_CTX_MAX = 3  # largest possible raw context factor for this query
P_MODE = 4  # 0 product, 1 weighted sum
P_RECENCY_HALF_LIFE = 5
P_FLOOR = 6
P_CONTEXT_BONUS = 7
P_DISTANCE = 8  # 1: candidate scores are inner-product distances (1 - cos)
P_WEIGHTS = 9  # 5 weights (similarity, recency, confidence, context, weight), summing to 1
# A superseded memory's score is multiplied by 1 - this, in [0, 1] (0: not
# demoted; stored as a demotion so that a zeroed parameter vector changes
# nothing). Superseded: its per-memory TTL is 0, which every supersession
# mark's damping sets and nothing else does (tierstore.rules.supersession).
P_SUPERSEDED_DEMOTION = 14
# query-time resolution in rank_and_gather (kernels.resolve): on when
# P_RESOLVE is 1; then the margins ([0, 1], negative: off), the minimum gap
# between the two statements' creation (seconds) and the confidence margin
P_RESOLVE = 15
P_RESOLVE_MARGIN = 16
P_RESOLVE_TAG_MARGIN = 17
P_RESOLVE_MIN_GAP = 18
P_RESOLVE_CONF_MARGIN = 19
NP = 20

# A query's inputs packed for rank_and_gather (see rerank.pack_query): every
# array argument costs the hot path about 0.1 us to cross into Numba, more
# with cold caches. Float vector: the NP parameters, the header below, then
# the initial weight per type and the multiplier per rule tag; int32 vector:
# the query's tags, the rule tags, the masked tags (each sorted).
Q_NTYPES = NP
Q_NQ_TAGS = NP + 1
Q_NRULES = NP + 2
Q_NMASKS = NP + 3
Q_HEADER = NP + 4

# rows of the packed result of rank_and_gather (column j: the j-th best hit):
# float64 rows (NRF, m): its score and factors, then the F rows a Memory
# snapshot reads, in SNAPSHOT_F order ...
R_SCORE = 0
R_NORM = 1  # the 5 normalised factors
R_RAW = 6  # the 5 raw factors
R_F = 11
SNAPSHOT_F = (F_CREATED, F_LAST_ACCESS, F_TTL, F_TTL_ANCHOR, F_DUE, F_TTL_OVERRIDE)
NRF = R_F + len(SNAPSHOT_F)
R_TTL_OVERRIDE = R_F + SNAPSHOT_F.index(F_TTL_OVERRIDE)  # 0: the hit is superseded
# ... and int64 rows (NRI, m): its slot, then the I rows in SNAPSHOT_I order
R_SLOT = 0
R_I = 1
SNAPSHOT_I = (I_TYPE, I_ACCESS_COUNT, I_PINNED)
R_BEFORE = R_I + len(SNAPSHOT_I)  # resolution: the slot of the hit this one was placed before, or -1
NRI = R_BEFORE + 1

# the access parameters rank_and_record takes in one float64 array
# (pack_access): the sweep thresholds (demote, archive, delete, delete bar),
# the confidence half-life, then per type: the boost, refresh-on-read (0/1)
# and whether the sweep may delete it (0/1)
A_THRESHOLDS = 0
A_CONF_HALF_LIFE = 4
A_HEADER = 5

# rank_and_gather ranks for a query whose squared length lies in
# [QUERY_N2_MIN, QUERY_N2_MAX] (length 1/16 to 65536) as it is, dividing the
# similarities by the length; outside (zero, NaN, inf included) it ranks
# nothing, and the caller normalises the query and searches again. Inside the
# band, float32 inner-product distances keep the cosine to about 1e-6.
QUERY_N2_MIN = 2.0**-8
QUERY_N2_MAX = 2.0**32

MODE_PRODUCT = 0
MODE_WEIGHTED_SUM = 1

# factor order in rerank outputs
FACTOR_NAMES = ("similarity", "recency", "confidence", "context", "weight")
