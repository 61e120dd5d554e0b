"""The router: :class:`Cluster` offers :class:`TierStore`'s API and sends each
call to the shard that owns the namespace's slot.

The slot table is rendezvous hashing over the live shards (the same table on
every router). A call that meets a dead shard (Ray reports the actor died, or
it does not answer a ping) marks it dead, has the survivors take its slots
(lease CAS, replay, fence) and retries; a call that meets a shard which does
not own the slot (it was moved, or fenced) refreshes the table and retries.
Every write carries a request id minted here, so a retry never applies twice
(the owner returns the first answer, also after a failover). Who is alive is
the router's view; what keeps two owners from both writing is the bucket's
conditional puts, never that view.

Locking: ``_lock`` guards the routing state (table, handles, the slots
moving) and is held only to read or update it, never across a Ray call, so a
call to a slot that is not moving never waits for a failover or a
rebalance. ``_placing`` serialises the placements (failovers, shards added
or removed, re-placements after a ``NotOwnerError``), which run outside
``_lock``: the slots they move are marked moving first, calls to those wait
(each up to its deadline), and each slot is routed to its new owner as soon
as that owner holds it.
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import fields, replace
from typing import Any

from tierstore import embedding as _embedding
from tierstore.cluster.bucket import BucketConfig
from tierstore.cluster.deadline import Deadline, check_deadline
from tierstore.cluster.errors import ClusterError, NotOwnerError
from tierstore.cluster.records import pack
from tierstore.cluster.shard import Shard, check_lease_check
from tierstore.cluster.slots import DEFAULT_SLOTS, check_slots, placement, slot_of
from tierstore.cluster.slotstore import DEFAULT_LEASE_CHECK_S
from tierstore.cluster.stats import sum_stats
from tierstore.core.integrity import IntegrityReport, Problem
from tierstore.errors import InvalidInputError, ObjectStoreError, StoreConfigError, TierStoreError
from tierstore.policy import Policy
from tierstore.records import Hit, Memory, Stats, SweepReport
from tierstore.rules.validation import check_namespace, check_positive_int, check_seconds
from tierstore.tiers.background import BackgroundSweeps, check_sweep_args

__all__ = ["Cluster"]

_ACTOR_PREFIX = "tierstore-"
_PING_TIMEOUT_S = 5.0
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_PER_SLOT_CALLS = 8  # slots verify/repair/compact_cold work on at once
DEFAULT_TAKEOVER_THREADS = 4  # slots a shard takes over at once (Shard's acquire_threads)


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - the extra is missing
        from tierstore.optional import missing_dependency

        raise missing_dependency(exc, "tierstore.cluster", "cluster") from exc
    return ray


def _check_bucket(config: BucketConfig, name: str) -> None:
    """The bucket answers (a wrong name, endpoint or credentials: StoreConfigError now,
    not after Ray started) and its prefix is ``name``'s or nobody's (:mod:`.identity`)."""
    from tierstore.cluster.identity import claim

    try:
        bucket = config.open()
        bucket.list("slots/00000/lease")
        claim(bucket, name)
    except ObjectStoreError as exc:
        raise StoreConfigError(f"cannot reach the cluster's bucket {config.bucket!r}: {exc}") from None


def _join_ray(ray: Any, address: str | None, name: str, num_cpus: int | None) -> None:
    """``ray.init`` for a router. An explicit address that is the Ray cluster
    running on this machine (the one ``"auto"`` finds) gets what ``"auto"``
    gets: Ray 2.60's token authentication with the local token, which Ray
    turns on by itself only for ``"auto"``. A connection Ray refuses is a
    ClusterError saying why and what to do."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if address not in (None, "auto") and "RAY_AUTH_MODE" not in os.environ and _is_local_ray(ray, address):
        _enable_local_token(ray)
    kwargs: dict[str, Any] = {"namespace": name, "include_dashboard": False, "log_to_driver": False}
    if address in (None, "local") and num_cpus is not None:
        kwargs["num_cpus"] = num_cpus
    try:
        ray.init(address=address, **kwargs)
    except (ConnectionError, RuntimeError) as exc:
        if "InvalidAuthToken" in _chain_text(exc) or "AuthenticationError" in _chain_text(exc):
            raise ClusterError(
                f"the Ray cluster at {address} wants its authentication token (Ray's token auth, on by default "
                "since 2.60): set RAY_AUTH_MODE=token, with the cluster's token in ~/.ray/auth_token, "
                "RAY_AUTH_TOKEN_PATH or RAY_AUTH_TOKEN ('ray get-auth-token' on its head node prints it); on a "
                "node of that cluster, address 'auto' finds it with its token"
            ) from None
        raise ClusterError(f"cannot join the Ray cluster at {address or 'this machine'}: {exc}") from None


def _is_local_ray(ray: Any, address: str) -> bool:
    """Whether ``address`` is a Ray cluster running on this machine: what
    ``address="auto"`` looks at (``ray start``'s record, and the GCS
    processes running here, which a ``ray.init()`` started by another process
    has)."""
    try:
        from ray._private.services import find_gcs_addresses
        from ray._private.utils import read_ray_address

        local = set(find_gcs_addresses()) | {read_ray_address()}
    except Exception:  # noqa: BLE001 - a Ray without them: treat the address as remote
        return False
    return address.strip() in local


def _enable_local_token(ray: Any) -> None:
    """Token auth with this machine's token, if there is one (Ray's own step for "auto")."""
    try:
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )
    except ImportError:  # a Ray before token auth
        return
    maybe_enable_token_auth_if_token_available(warn_if_disabled=False)


def _chain_text(exc: BaseException) -> str:
    """The messages of ``exc`` and its causes (Ray wraps the auth failure twice)."""
    parts: list[str] = []
    seen: BaseException | None = exc
    while seen is not None and len(parts) < 8:
        parts.append(f"{type(seen).__name__}: {seen}")
        seen = seen.__cause__ or seen.__context__
    return "\n".join(parts)


def _listify(value: Any) -> Any:
    """Iterables (tags, ids) as lists: generators do not travel to actors."""
    if value is None or isinstance(value, (str, bytes, Mapping)):
        return value
    if hasattr(value, "__iter__") and not hasattr(value, "dtype"):
        return list(value)
    return value


class Cluster:
    """Namespaces sharded over Ray actors; the bucket is the system of record.

    address: the Ray cluster to join — its ``HOST:PORT`` (another router's
    :attr:`ray_address`), ``"auto"`` (the one running on this machine, or
    ``RAY_ADDRESS``), ``"local"`` (start a new one here, with ``num_cpus``);
    ``None`` is Ray's own default: ``RAY_ADDRESS``, else a Ray already
    running on this machine, else a new one — so it may join another
    cluster than meant (see docs/cluster.md, *Which Ray*). In a process
    where Ray is already initialised, that Ray is used. bucket: where slots keep
    their leases and logs (a name, with ``s3_options`` such as
    ``endpoint_url``, and ``prefix``; or a :class:`BucketConfig`), checked
    before Ray starts: it must answer, and its prefix must be this cluster
    name's or no cluster's (:mod:`tierstore.cluster.identity`). shards: how
    many shard actors to start now (beside any already running under this
    ``name`` in the Ray cluster, which are found and used). dim, num_slots,
    policy: the stores' (fixed for the cluster's life). root: the shards'
    local directory (a cache). call_timeout_s: a call not answered by then has
    its shard pinged; one that does not answer the ping is declared dead.
    deadline_s: the default deadline of a call, seconds from its start, over
    every wait and retry (its slot moving to a new owner, the owner's
    answer); past it the call raises :class:`DeadlineExceededError`. Each
    namespace's call takes its own ``deadline_s=`` too. retry_for_s: the
    older name of ``deadline_s``.
    snapshot_every: a slot's log records between its snapshots (and one at
    every release); a new owner replays only the records after the newest.
    lease_check_s: the read-fencing bound, seconds: a shard answers a read
    of a slot only while it confirmed the slot's lease within this time (a
    conditional GET when it is older), so a stale owner's reads are refused
    at most this long after its slot moved (see docs/cluster.md).
    embedder: text in, as :meth:`TierStore.open`'s (a name such as
    ``"minilm"``, or a callable ``list[str] -> float32 (n, dim)``). Text is
    embedded here, in the router, so the log holds vectors and a replay never
    needs the model; ``dim`` defaults to the embedder's. The first router
    records the embedder's name and dim with the shards, and a router that
    joins with a different one is refused (one without an embedder passes
    vectors). takeover_threads: how many slots a shard takes over at once
    (in a failover or a rebalance): fewer is gentler on the namespaces it
    serves meanwhile, more brings the moved ones back sooner (see
    docs/benchmarks.md, issue 31); a setting of the shards, as ``root`` is
    (a router that joins uses theirs). keep_history: keep every log record, snapshot and blob in the
    bucket; by default a slot's owner deletes, after each snapshot, what no
    replay can need (see docs/cluster.md, *Garbage collection*).
    """

    def __init__(
        self,
        address: str | None = None,
        *,
        bucket: str | BucketConfig | None = None,
        s3_options: Mapping[str, Any] | None = None,
        prefix: str = "",
        dim: int | None = None,
        shards: int = 0,
        num_slots: int = DEFAULT_SLOTS,
        root: str | None = None,
        policy: Policy | None = None,
        name: str = "tierstore",
        num_cpus: int | None = None,
        call_timeout_s: float = 30.0,
        deadline_s: float = 60.0,
        retry_for_s: float | None = None,
        spread: bool = True,
        snapshot_every: int = 100,
        lease_check_s: float = DEFAULT_LEASE_CHECK_S,
        embedder: Any = None,
        keep_history: bool = False,
        takeover_threads: int = DEFAULT_TAKEOVER_THREADS,
    ) -> None:
        # every argument checked before Ray starts: bad input changes nothing
        if dim is not None:
            dim = check_positive_int(dim, "dim")
        num_slots = check_slots(num_slots)
        if isinstance(shards, bool) or not isinstance(shards, int) or shards < 0:
            raise InvalidInputError(f"shards must be an int >= 0, got {shards!r}")
        for what, value in (("call_timeout_s", call_timeout_s), ("deadline_s", deadline_s)):
            check_deadline(value, what)
        if retry_for_s is not None:  # the older name
            deadline_s = check_deadline(retry_for_s, "retry_for_s")
        if isinstance(snapshot_every, bool) or not isinstance(snapshot_every, int) or snapshot_every < 0:
            raise InvalidInputError(f"snapshot_every must be an int >= 0, got {snapshot_every!r}")
        lease_check_s = check_lease_check(lease_check_s)
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise InvalidInputError(
                f"name must be 1-64 letters, digits, '_', '.' or '-' (the cluster's Ray namespace), got {name!r}"
            )
        if not isinstance(keep_history, bool):
            raise InvalidInputError(f"keep_history must be True or False, got {keep_history!r}")
        self._takeover_threads = check_positive_int(takeover_threads, "takeover_threads")
        emb = _embedding.resolve(embedder)  # last (it may load a model); an unknown name fails here, before Ray
        if emb is not None and dim is not None and dim != emb.dim:
            raise StoreConfigError(f"dim={dim} but the embedder {emb.name!r} makes vectors of dimension {emb.dim}")
        self._embedder = emb
        if bucket is not None and not isinstance(bucket, (str, BucketConfig)):
            raise InvalidInputError(f"bucket must be a name or a BucketConfig, got {type(bucket).__name__}")
        # the bucket before Ray (which takes seconds to start): reachable, with credentials that work, and
        # this cluster's (or no cluster's yet) — a prefix another cluster name holds is refused
        config = (
            None
            if bucket is None
            else bucket
            if isinstance(bucket, BucketConfig)
            else BucketConfig(bucket, prefix, dict(s3_options or {}))
        )
        if config is not None:
            _check_bucket(config, name)
        ray = _ray()
        self._rayexc = ray.exceptions
        if not ray.is_initialized():
            _join_ray(ray, address, name, num_cpus)
            self._started_ray = True
        else:
            self._started_ray = False
        self.name = name
        self._lock = threading.RLock()  # the routing state below; never held across a Ray call
        self._changed = threading.Condition(self._lock)  # notified when the table or the slots moving change
        self._placing = threading.Lock()  # one placement at a time (held across Ray calls, never by a routed call)
        self._handles: dict[str, Any] = {}
        self._dead: set[str] = set()
        self._table: dict[int, str] = {}
        self._moving: set[int] = set()  # slots changing owner: their calls wait (up to their deadlines)
        self._generation = 0  # bumped whenever the table changes
        self._placements = 0  # placements finished (or failed), for calls waiting on one
        self._place_error: str | None = None  # why the last placement failed (None: it did not)
        self._place_queued = False  # a re-placement thread is waiting for _placing
        self._failover_hook: Callable[[str], None] | None = None  # tests: runs in a failover, holding _placing
        self._sweep_cursor = 0  # the slot the next budgeted sweep starts at
        self._background = BackgroundSweeps(self._sweep_due, "tierstore-cluster-migrator")
        self.call_timeout_s = float(call_timeout_s)
        self.deadline_s = float(deadline_s)
        self._spread = spread
        # what each failover moved and how long it took ("seconds" is None while it runs)
        self.failovers: list[dict[str, Any]] = []
        try:
            self._connect(config, dim, shards, num_slots, root, policy, snapshot_every, lease_check_s, keep_history)
        except BaseException:
            if self._started_ray:
                ray.shutdown()
            raise

    def _connect(
        self,
        bucket: BucketConfig | None,
        dim: int | None,
        shards: int,
        num_slots: int,
        root: str | None,
        policy: Policy | None,
        snapshot_every: int,
        lease_check_s: float,
        keep_history: bool,
    ) -> None:
        """Find the running shards (or take the new cluster's checked bucket), start ``shards`` more, place the
        slots."""
        ray = _ray()
        self._discover()
        if self._handles:
            info = ray.get(next(iter(self._handles.values())).info.remote(), timeout=_PING_TIMEOUT_S)
            self.dim, self.num_slots, self._bucket = info["dim"], info["num_slots"], info["bucket"]
            self._policy = info["policy"]
            self._root = info["root"]
            self._snapshot_every = info["snapshot_every"]
            self._lease_check_s = info.get("lease_check_s", DEFAULT_LEASE_CHECK_S)
            self._keep_history = info.get("keep_history", True)  # shards of a version without it kept everything
            self._takeover_threads = info.get("takeover_threads", DEFAULT_TAKEOVER_THREADS)
            if dim is not None and dim != self.dim:
                raise StoreConfigError(f"the cluster {self.name!r} running here has dim={self.dim}, not {dim}")
            running = (self._bucket.bucket, self._bucket.prefix.strip("/"))
            if bucket is not None and (bucket.bucket, bucket.prefix.strip("/")) != running:
                raise StoreConfigError(
                    f"the cluster {self.name!r} running here keeps its slots in "
                    f"s3://{running[0]}/{running[1]}, not s3://{bucket.bucket}/"
                    f"{bucket.prefix.strip('/')}: leave bucket= out to join it"
                )
            self._embedder_record = info.get("embedder")
            if self._embedder is not None:
                if self._embedder.dim != self.dim:
                    raise StoreConfigError(
                        f"the cluster {self.name!r} has dim={self.dim}; the embedder "
                        f"{self._embedder.name!r} makes vectors of dimension {self._embedder.dim}"
                    )
                _embedding.check_against_record(self._embedder, self._embedder_record, f"cluster {self.name!r}")
        else:
            if bucket is None and dim is None and not shards:  # meant to join a running cluster
                raise ClusterError(
                    f"no shard of the cluster {self.name!r} runs in this Ray cluster (start it "
                    f"with Cluster(bucket=..., dim=..., shards=N, name={self.name!r}))"
                )
            if dim is None and self._embedder is not None:
                dim = self._embedder.dim
            if bucket is None or dim is None:
                raise InvalidInputError("a new cluster needs bucket= and dim= (or an embedder)")
            self.dim = dim
            self._embedder_record = None if self._embedder is None else self._embedder.record()
            self.num_slots = num_slots
            self._bucket = bucket  # checked before Ray started (_check_bucket)
            self._snapshot_every = snapshot_every
            self._lease_check_s = lease_check_s
            self._keep_history = keep_history
            self._policy = policy
            self._root = root or os.path.join(tempfile.gettempdir(), f"tierstore-cluster-{self.name}")
        for _ in range(shards):
            self._start_shard()
        if not self._handles:
            raise InvalidInputError("no shard: pass shards=N to start some")
        with self._placing:
            self._place()

    # ------------------------------------------------------------------ membership

    def _discover(self) -> None:
        ray = _ray()
        for entry in ray.util.list_named_actors(all_namespaces=True):
            if entry.get("namespace") != self.name or not entry["name"].startswith(_ACTOR_PREFIX):
                continue
            try:
                handle = ray.get_actor(entry["name"], namespace=self.name)
                ray.get(handle.ping.remote(), timeout=_PING_TIMEOUT_S)
            except Exception:  # noqa: BLE001 - a dead or unreachable shard is not a member
                continue
            self._handles[entry["name"][len(_ACTOR_PREFIX) :]] = handle

    def _start_shard(self) -> str:
        ray = _ray()
        with self._lock:
            known = (*self._handles, *self._dead)
        used = {int(n.split("-")[-1]) for n in known if n.split("-")[-1].isdigit()}
        shard_name = f"shard-{max(used, default=-1) + 1}"
        options: dict[str, Any] = {
            "name": _ACTOR_PREFIX + shard_name,
            "namespace": self.name,
            "num_cpus": 0,
            "max_concurrency": 32,
            "max_restarts": 0,
            "lifetime": "detached",
        }
        if self._spread:
            options["scheduling_strategy"] = "SPREAD"  # one per node where there are nodes
        handle = (
            ray.remote(_ShardActor)
            .options(**options)
            .remote(
                shard_name,
                self._bucket,
                dim=self.dim,
                num_slots=self.num_slots,
                root=self._root,
                policy=self._policy,
                snapshot_every=self._snapshot_every,
                lease_check_s=self._lease_check_s,
                embedder=self._embedder_record,
                keep_history=self._keep_history,
                takeover_threads=self._takeover_threads,
            )
        )
        ray.get(handle.ping.remote(), timeout=120)
        with self._lock:
            self._handles[shard_name] = handle
        return shard_name

    @property
    def ray_address(self) -> str:
        """The address of the Ray cluster this router joined (``HOST:PORT`` of its
        GCS): what another process gives to join the same one
        (``Cluster(address)``, ``tierstore serve --cluster ADDRESS``)."""
        return str(_ray().get_runtime_context().gcs_address)

    @property
    def shards(self) -> list[str]:
        """The live shards' names."""
        with self._lock:
            return sorted(self._handles)

    def slot_table(self) -> dict[int, str]:
        """Slot -> owning shard, as this router routes."""
        with self._lock:
            return dict(self._table)

    def handle(self, shard: str) -> Any:
        """The Ray actor handle of a shard (tests and tools)."""
        with self._lock:
            return self._handles[shard]

    def slot_of(self, ns: str) -> int:
        return slot_of(check_namespace(ns), self.num_slots)

    def owner_of(self, ns: str) -> str:
        with self._lock:
            return self._table[self.slot_of(ns)]

    def add_shard(self) -> str:
        """Start one more shard: it takes the slots rendezvous hashing gives it
        (their old owners release them first); no other slot moves, and only
        calls to the slots that move wait for it."""
        with self._placing:
            shard = self._start_shard()
            self._place()
            return shard

    def remove_shard(self, shard: str, *, graceful: bool = True) -> None:
        """Take a shard out: its slots go to the others. ``graceful``: it
        releases them first (an orderly scale-down); otherwise it is treated
        as dead (its slots are taken over and its later writes are fenced)."""
        ray = _ray()
        with self._placing:
            with self._lock:
                handle = self._handles.pop(shard)
                self._dead.add(shard)
                self._mark_moving(shard)
            try:
                if graceful:
                    ray.get(handle.close.remote(), timeout=max(self.call_timeout_s, 60.0))
                    ray.kill(handle)
            finally:
                self._place()

    def check_shards(self, timeout_s: float = _PING_TIMEOUT_S, *, kill: bool = True) -> list[str]:
        """Ping every shard; fail over the ones that do not answer within
        ``timeout_s`` (and, ``kill``, have Ray kill them). Returns the shards
        declared dead, once their slots have new owners."""
        ray = _ray()
        with self._lock:
            pings = {name: h.ping.remote() for name, h in self._handles.items()}
        dead = []
        for name, ref in pings.items():
            try:
                ray.get(ref, timeout=timeout_s)
            except Exception:  # noqa: BLE001 - no answer, for whatever reason: not a member
                dead.append(name)
        for name in dead:
            self._fail_over(name, kill=kill, wait=True)
        return dead

    def _mark_moving(self, shard: str) -> list[int]:
        """Mark ``shard``'s slots as moving (caller holds ``_lock``): calls to them wait for their new owner."""
        slots = [s for s, owner in self._table.items() if owner == shard]
        self._moving.update(slots)
        self._changed.notify_all()
        return slots

    def _fail_over(self, shard: str, *, kill: bool = True, wait: bool = False) -> None:
        """Declare ``shard`` dead and have the others take its slots. Its
        slots are marked moving at once: calls to them wait (each up to its
        deadline), calls to other slots go on. The takeover runs in a thread
        of its own, or in this one with ``wait``. ``kill``: also have Ray
        kill its process, so that no router finds it alive again (one cut off
        from Ray keeps running: fencing stops its writes)."""
        ray = _ray()
        with self._lock:
            if shard not in self._handles:
                return  # another thread did it
            started = time.monotonic()
            handle = self._handles.pop(shard)
            self._dead.add(shard)
            moved = self._mark_moving(shard)
            entry: dict[str, Any] = {"shard": shard, "slots": len(moved), "seconds": None}
            self.failovers.append(entry)
        if kill:
            try:
                ray.kill(handle, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass

        def take_over() -> None:
            try:
                with self._placing:
                    if self._failover_hook is not None:
                        self._failover_hook(shard)
                    self._place()
            except BaseException as exc:
                entry["error"] = f"{type(exc).__name__}: {exc}"
                if wait:
                    raise
            finally:
                entry["seconds"] = time.monotonic() - started

        if wait:
            take_over()
        else:
            threading.Thread(target=take_over, name=f"tierstore-failover-{shard}", daemon=True).start()

    def _place(self) -> None:
        """Make the shards own what rendezvous hashing over the live shards
        says (caller holds ``_placing``, not ``_lock``): the slots changing
        owner are marked moving, their old owners release them, their new
        owners take them, each slot routed to its new owner as soon as it
        holds it. Finally only the slots whose new owner died meanwhile stay
        moving (that death's failover places them); after a failure, none."""
        ok = False
        try:
            for _ in range(8):
                with self._lock:
                    handles = dict(self._handles)
                    if not handles:
                        raise ClusterError("no live shard")
                    table = placement(self.num_slots, handles)
                    self._moving.update(s for s, owner in table.items() if self._table.get(s) != owner)
                try:
                    self._move_to(table, handles)
                except (self._rayexc.RayActorError, self._rayexc.GetTimeoutError):
                    for n, h in handles.items():
                        if not self._ping(h, _PING_TIMEOUT_S):
                            with self._lock:
                                if self._handles.pop(n, None) is not None:
                                    self._dead.add(n)
                                    self._mark_moving(n)
                    continue
                except self._rayexc.RayTaskError as exc:
                    if isinstance(exc.cause, NotOwnerError):  # a race with another taker: look again
                        continue
                    raise
                with self._lock:
                    self._table = table
                    self._generation += 1
                ok = True
                return
            raise ClusterError("could not place the slots on the live shards after 8 tries")
        except BaseException as exc:
            with self._lock:
                self._place_error = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            with self._lock:
                if ok:
                    self._place_error = None
                    self._moving = {s for s in self._moving if self._table.get(s) not in self._handles}
                else:
                    self._moving.clear()  # the calls retry, and ask for a placement that can tell them why not
                self._placements += 1
                self._changed.notify_all()

    def _move_to(self, table: dict[int, str], handles: dict[str, Any]) -> None:
        """Releases, then one take per slot (a shard takes a few at a time):
        each slot is routed to its new owner when that owner's take returns.
        Ray's errors propagate, once every take sent has finished."""
        ray = _ray()
        refs = {n: h.owned.remote() for n, h in handles.items()}
        owned = {n: ray.get(ref, timeout=self.call_timeout_s) for n, ref in refs.items()}
        release = {n: [s for s in owned[n] if table[s] != n] for n in owned}
        ray.get([handles[n].release.remote(s) for n, s in release.items() if s], timeout=self.call_timeout_s)
        takes = {handles[owner].acquire.remote([s]): (s, owner) for s, owner in table.items() if s not in owned[owner]}
        pending = list(takes)
        until = time.monotonic() + max(self.call_timeout_s, 120.0)
        try:
            while pending:
                ready, pending = ray.wait(pending, num_returns=1, timeout=max(0.0, until - time.monotonic()))
                if not ready:
                    raise self._rayexc.GetTimeoutError(f"{len(pending)} slot takes not done in time")
                for ref in ready:
                    ray.get(ref)
                    slot, owner = takes[ref]
                    with self._lock:
                        self._table[slot] = owner
                        self._moving.discard(slot)
                        self._generation += 1
                        self._changed.notify_all()
        except BaseException:
            if pending:  # let the takes under way finish before anyone places again
                ray.wait(pending, num_returns=len(pending), timeout=max(0.0, until - time.monotonic()))
            raise

    def _ping(self, handle: Any, timeout: float) -> bool:
        """Whether the shard answers a ping within ``timeout`` seconds."""
        ray = _ray()
        try:
            ray.get(handle.ping.remote(), timeout=timeout)
            return True
        except Exception:  # noqa: BLE001
            return False

    # ------------------------------------------------------------------ calls

    def _call(
        self,
        ns: str | None,
        kind: str,
        op: str,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        slot: int | None = None,
        deadline_s: float | None = None,
    ) -> Any:
        ray = _ray()
        deadline = Deadline(self.deadline_s if deadline_s is None else check_deadline(deadline_s))
        if slot is None:
            slot = slot_of(check_namespace(ns), self.num_slots)
        rid = uuid.uuid4().hex if kind == "write" else ""
        args, kwargs = [_listify(a) for a in args], {k: _listify(v) for k, v in (kwargs or {}).items()}
        try:  # one msgpack argument is much cheaper for Ray than five objects (see Shard.call)
            packed: bytes | None = pack([kind, slot, rid, op, ns, args, kwargs])
        except (TypeError, ValueError, OverflowError):
            packed = None  # e.g. a datetime in restore(where=...): Ray serialises it

        while True:
            shard, handle, generation = self._route(slot, deadline)
            try:
                if handle is None:
                    raise NotOwnerError(slot, f"slot {slot} has no live owner")
                if packed is not None:
                    ref = handle.call.remote(packed)
                elif kind == "write":
                    ref = handle.write.remote(slot, rid, op, ns, args, kwargs)
                else:
                    ref = handle.read.remote(slot, op, ns, args, kwargs)
                return ray.get(ref, timeout=min(self.call_timeout_s, deadline.remaining()))
            except NotOwnerError:
                self._await_placement(slot, generation, deadline)
            except self._rayexc.RayTaskError as exc:
                cause = exc.cause
                if isinstance(cause, NotOwnerError):
                    self._await_placement(slot, generation, deadline)
                elif isinstance(cause, (TierStoreError, ValueError, TypeError, KeyError)):
                    raise cause.with_traceback(None) from None
                else:
                    raise
            except self._rayexc.RayActorError:
                if shard is not None:  # always: without a shard there is no handle to fail
                    self._fail_over(shard)
            except self._rayexc.GetTimeoutError:
                left = deadline.remaining()
                what = f"{op} on slot {slot}: its owner {shard} had not answered"
                if left <= 0:
                    raise deadline.exceeded(slot, "shard", what) from None
                if not self._ping(handle, min(_PING_TIMEOUT_S, left)):
                    if left < _PING_TIMEOUT_S:  # a ping cut short by the deadline says nothing: not declared dead
                        raise deadline.exceeded(slot, "shard", what + " (nor a ping)") from None
                    if shard is not None:
                        self._fail_over(shard)
            time.sleep(min(0.02, deadline.remaining()))

    def _route(self, slot: int, deadline: Deadline) -> tuple[str | None, Any, int]:
        """The slot's owner, its handle and the table's generation; while the
        slot is moving, waits for its new owner (up to the deadline)."""
        with self._lock:
            while slot in self._moving:
                left = deadline.remaining()
                if left <= 0:
                    raise deadline.exceeded(
                        slot, "slot move", f"slot {slot} was still moving to a new owner (a failover or a rebalance)"
                    )
                self._changed.wait(left)
            if deadline.remaining() <= 0:
                raise deadline.exceeded(slot, "shard", f"slot {slot}: no owner answered in time")
            shard = self._table.get(slot)
            return shard, self._handles.get(shard) if shard is not None else None, self._generation

    def _await_placement(self, slot: int, generation: int, deadline: Deadline) -> None:
        """A shard did not own ``slot`` (moved, released, fenced, or no live
        owner): unless the table changed since ``generation``, have the slots
        placed again (in a thread of its own) and wait until it is done, up to
        the deadline. A placement that failed raises its error here."""
        with self._lock:
            if self._generation != generation:
                return
            placements = self._placements
            if not self._place_queued:
                self._place_queued = True
                threading.Thread(target=self._place_again, name="tierstore-cluster-place", daemon=True).start()
            while self._generation == generation and self._placements == placements:
                left = deadline.remaining()
                if left <= 0:
                    raise deadline.exceeded(slot, "placement", f"slot {slot}: the router was still placing the slots")
                self._changed.wait(left)
            if self._generation == generation and self._place_error is not None:
                raise ClusterError(f"slot {slot}: could not place the slots: {self._place_error}")

    def _place_again(self) -> None:
        """A re-placement asked for by a call (its errors reach the calls waiting for it)."""
        with self._placing:
            with self._lock:
                self._place_queued = False
            try:
                self._place()
            except Exception:  # noqa: BLE001 - kept in _place_error for the waiting calls
                pass

    # ------------------------------------------------------------------ TierStore's API

    def add(
        self,
        ns: str,
        content: str,
        embedding: Any = None,
        *,
        memory_type: str = "fact",
        confidence: float = 0.8,
        source: str = "user_declaration",
        tags: Iterable[str] = (),
        ttl_seconds: float | None = None,
        pinned: bool = False,
        id: str | None = None,
        supersedes: Iterable[str] = (),
        key: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        deadline_s: float | None = None,
    ) -> str:
        """:meth:`TierStore.add`: acknowledged once durable in the bucket.
        With an embedder, ``embedding`` may be ``None`` (the content's) or a
        text; it is embedded here and the vector is what is logged.
        ``deadline_s``, here and on every namespace's call: this call's
        deadline, seconds (default: the cluster's ``deadline_s``); past it,
        :class:`DeadlineExceededError`."""
        check_namespace(ns)
        embedding = _embedding.fill_embeddings(self._embedder, [{"content": content, "embedding": embedding}])[0][
            "embedding"
        ]
        return self._call(
            ns,
            "write",
            "add",
            [content, embedding],
            {
                "memory_type": memory_type,
                "confidence": confidence,
                "source": source,
                "tags": tags,
                "ttl_seconds": ttl_seconds,
                "pinned": pinned,
                "id": id,
                "supersedes": supersedes,
                "key": key,
                "metadata": None if metadata is None else dict(metadata),
            },
            deadline_s=deadline_s,
        )

    def add_batch(self, ns: str, items: Sequence[Mapping[str, Any]], *, deadline_s: float | None = None) -> list[str]:
        """:meth:`TierStore.add_batch`: all or nothing, one log record."""
        if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Sequence):
            raise InvalidInputError("add_batch items must be a list of dicts")
        check_namespace(ns)
        items = _embedding.fill_embeddings(self._embedder, items)  # one batched call of the model
        wire = [{k: _listify(v) for k, v in item.items()} if isinstance(item, Mapping) else item for item in items]
        return self._call(ns, "write", "add_batch", [wire], deadline_s=deadline_s)

    def search(
        self,
        ns: str,
        query: Any,
        *,
        k: int = 5,
        context_tags: Iterable[str] = (),
        memory_types: Iterable[str] | None = None,
        min_confidence: float = 0.0,
        include_warm: bool = True,
        include_cold: bool | str | None = None,
        record_access: bool | None = None,
        explain: bool = False,
        text: str | None = None,
        deadline_s: float | None = None,
    ) -> list[Hit]:
        """:meth:`TierStore.search`. An access is a write (a log append), so it
        is recorded only when asked: ``record_access=True`` searches, then
        touches the hits (durably); ``None`` means False here. A text query
        needs an embedder (it is embedded here; its words go to the shard as
        ``text``, for the keyword signal)."""
        check_namespace(ns)
        if isinstance(query, str) and text is None:
            text = query
        query = _embedding.embed_query(self._embedder, query)
        hits = self._call(
            ns,
            "read",
            "search",
            [query],
            {
                "k": k,
                "context_tags": context_tags,
                "memory_types": memory_types,
                "min_confidence": min_confidence,
                "include_warm": include_warm,
                "include_cold": include_cold,
                "record_access": False,
                "explain": explain,
                "text": text,
            },
            deadline_s=deadline_s,
        )
        if record_access and hits:
            self.touch(ns, [h.memory.id for h in hits], deadline_s=deadline_s)
        return hits

    def get(self, ns: str, id: str, *, deadline_s: float | None = None) -> Memory | None:
        return self._call(ns, "read", "get", [id], deadline_s=deadline_s)

    def get_by_key(self, ns: str, key: str, *, deadline_s: float | None = None) -> Memory | None:
        return self._call(ns, "read", "get_by_key", [key], deadline_s=deadline_s)

    def memories(self, ns: str, *, with_embedding: bool = False, deadline_s: float | None = None) -> list[Memory]:
        return self._call(ns, "read", "memories", [], {"with_embedding": with_embedding}, deadline_s=deadline_s)

    def memories_page(
        self,
        ns: str,
        *,
        after: str | None = None,
        limit: int | None = None,
        with_embedding: bool = False,
        deadline_s: float | None = None,
    ) -> tuple[list[Memory], str | None]:
        """:meth:`TierStore.memories_page` of the namespace's slot (a cursor is a position in that slot's store)."""
        return self._call(
            ns,
            "read",
            "memories_page",
            [],
            {"after": after, "limit": limit, "with_embedding": with_embedding},
            deadline_s=deadline_s,
        )

    def check_batch(self, ns: str, items: Sequence[Mapping[str, Any]], *, deadline_s: float | None = None) -> None:
        items = list(items) if isinstance(items, Sequence) else items
        self._call(ns, "read", "check_batch", [items], deadline_s=deadline_s)

    def get_context(self, ns: str, *, deadline_s: float | None = None) -> tuple[str, ...]:
        return tuple(self._call(ns, "read", "get_context", deadline_s=deadline_s))

    def touch(self, ns: str, ids: str | Iterable[str], *, deadline_s: float | None = None) -> None:
        self._call(ns, "write", "touch", [ids], deadline_s=deadline_s)

    def feedback(
        self,
        ns: str,
        id: str,
        *,
        positive: bool,
        strength: float = 1.0,
        implicit: bool = False,
        deadline_s: float | None = None,
    ) -> Memory:
        kwargs = {"positive": positive, "strength": strength, "implicit": implicit}
        return self._call(ns, "write", "feedback", [id], kwargs, deadline_s=deadline_s)

    def pin(self, ns: str, id: str, pinned: bool = True, *, deadline_s: float | None = None) -> None:
        self._call(ns, "write", "pin", [id, pinned], deadline_s=deadline_s)

    def delete(self, ns: str, id: str, *, deadline_s: float | None = None) -> bool:
        return self._call(ns, "write", "delete", [id], deadline_s=deadline_s)

    def set_context(self, ns: str, tags: Iterable[str], *, deadline_s: float | None = None) -> None:
        self._call(ns, "write", "set_context", [tags], deadline_s=deadline_s)

    def restore(
        self,
        ns: str,
        *,
        ids: Iterable[str] | None = None,
        where: Mapping[str, Any] | None = None,
        text: str | None = None,
        query: Any = None,
        k: int | None = None,
        limit: int | None = None,
        progress: bool | None = False,
        deadline_s: float | None = None,
    ) -> list[str]:
        """:meth:`TierStore.restore` (a logged write); a text ``query`` is embedded here."""
        check_namespace(ns)
        if query is not None:
            query = _embedding.embed_query(self._embedder, query)
        return self._call(
            ns,
            "write",
            "restore",
            [],
            {
                "ids": ids,
                "where": None if where is None else dict(where),
                "text": text,
                "query": query,
                "k": k,
                "limit": limit,
            },
            deadline_s=deadline_s,
        )

    def sweep(
        self,
        *,
        max_items: int | None = None,
        time_budget_s: float | None = None,
        progress: bool | None = False,
        dry_run: bool = False,
    ) -> SweepReport:
        """Sweep the slots, one after another: each slot's sweep is a logged
        write at one store time (so a replay sweeps the same), bounded by
        ``max_items`` (per slot). ``time_budget_s`` bounds the whole call
        between slots: the slots not reached are swept first by the next call,
        and ``remaining_due`` is then at least 1. ``dry_run``: each slot's
        owner counts what is due and what it would do (a read: nothing is
        logged or changed, and the next real sweep starts where it would have)."""
        if max_items is not None:
            max_items = check_positive_int(max_items, "max_items")
        time_budget_s = check_seconds(time_budget_s, "time_budget_s", optional=True)
        if not isinstance(dry_run, bool):
            raise InvalidInputError(f"dry_run must be True or False, got {dry_run!r}")
        return self._sweep_slots(max_items, time_budget_s, dry_run, only_due=False)

    def _sweep_due(self, max_items: int, time_budget_s: float) -> SweepReport:
        """A background pass: each slot's owner first says whether anything
        is due (a read); only those slots sweep (a logged write: a PUT), so
        an idle cluster's passes write nothing."""
        return self._sweep_slots(max_items, time_budget_s, False, only_due=True)

    def _sweep_slots(
        self, max_items: int | None, time_budget_s: float | None, dry_run: bool, *, only_due: bool
    ) -> SweepReport:
        started = time.monotonic()
        reports: list[SweepReport] = []
        skipped = 0
        with self._lock:
            first = self._sweep_cursor
        for i in range(self.num_slots):
            slot = (first + i) % self.num_slots
            if time_budget_s is not None and reports and time.monotonic() - started >= time_budget_s:
                skipped = self.num_slots - i
                if not dry_run:
                    with self._lock:
                        self._sweep_cursor = slot
                break
            if dry_run or only_due:
                preview = self._call(None, "read", "sweep_preview", [], {"max_items": max_items}, slot=slot)
                if dry_run or (preview.examined == 0 and preview.remaining_due == 0):
                    reports.append(preview)
                    continue
            reports.append(self._call(None, "write", "sweep", [], {"max_items": max_items}, slot=slot))
        total = _merge_reports(reports, time.monotonic() - started)
        total.dry_run = dry_run
        if skipped:
            total.remaining_due = max(total.remaining_due, 1)
        return total

    def start_migrator(self, *, interval_s: float = 60.0, max_items: int = 10_000, time_budget_s: float = 5.0) -> None:
        """:meth:`TierStore.start_migrator` for the cluster: :meth:`sweep`
        from a thread of this router every ``interval_s`` seconds (each slot
        bounded by ``max_items``, the pass by ``time_budget_s``: the slots not
        reached come first next time), sooner while work remains, backing
        off after errors (the last 100 in :attr:`background_errors`).
        One router of a cluster is enough: the sweeps are logged writes of
        each slot, so two would only sweep more often."""
        self._background.start(*check_sweep_args(interval_s, max_items, time_budget_s))

    def stop_migrator(self, timeout: float = 30.0) -> None:
        """Stop this router's background sweeps (waits for a pass under way)."""
        self._background.stop(timeout)

    @property
    def migrator_running(self) -> bool:
        """Whether this router runs background sweeps (:meth:`start_migrator`)."""
        return self._background.running

    @property
    def background_errors(self) -> list[str]:
        """The last failures of the background sweeps (``start_migrator``)."""
        return list(self._background.errors)

    def _per_slot(self, kind: str, op: str) -> list[tuple[int, Any]]:
        """``op`` on every slot's store (routed, retried, idempotent), in slot
        order; up to ``_PER_SLOT_CALLS`` slots at a time, since each waits
        mostly for its owner (and, for a write, its log PUT)."""
        slots = range(self.num_slots)
        with ThreadPoolExecutor(min(_PER_SLOT_CALLS, self.num_slots)) as pool:
            results = list(pool.map(lambda slot: self._call(None, kind, op, [], {}, slot=slot), slots))
        return list(zip(slots, results))

    def verify(self) -> IntegrityReport:
        """:meth:`TierStore.verify` on every slot's store (a read of each, on
        its owner), merged: each problem's ``where`` names its slot
        (``slot 00007: ...``), ``checked`` counts are summed. Checks the
        owners' local copies; the bucket's snapshots and log are checked when
        a slot is taken (a corrupt snapshot is passed over)."""
        return _merge_integrity(self._per_slot("read", "verify"))

    def repair(self) -> IntegrityReport:
        """:meth:`TierStore.repair` on every slot's store, merged as
        :meth:`verify`'s reports are. Each slot's repair is a logged write (it
        may rewrite catalog rows), so it waits for that slot's group commit
        and a new owner replays it."""
        return _merge_integrity(self._per_slot("write", "repair"))

    def compact_cold(self, *, progress: bool | None = False) -> int:
        """:meth:`TierStore.compact_cold` on every slot (a logged write each):
        the archive objects rewritten, summed. ``progress`` is accepted for
        the same signature and ignored (the shards draw no bars)."""
        return sum(int(n) for _, n in self._per_slot("write", "compact_cold"))

    def namespaces(self) -> list[str]:
        """Every namespace holding memories, over all shards, sorted."""
        ray = _ray()
        with self._lock:
            handles = list(self._handles.values())
        names: set[str] = set()
        for part in ray.get([h.namespaces.remote() for h in handles], timeout=self.call_timeout_s):
            names.update(part)
        return sorted(names)

    def stats(self, *, lifecycle: bool = True) -> Stats:
        """:meth:`TierStore.stats` summed over the shards (each slot's store
        counted by its owner). Lifecycle metrics are per store and not kept
        for a cluster: ``Stats.lifecycle`` is ``{}`` whatever ``lifecycle``
        says (the same signature as TierStore's, so ``RemoteStore.stats()``
        of a served cluster works)."""
        if not isinstance(lifecycle, bool):
            raise InvalidInputError(f"lifecycle must be True or False, got {lifecycle!r}")
        ray = _ray()
        with self._lock:
            handles = list(self._handles.values())
        return sum_stats(ray.get([h.stats.remote() for h in handles], timeout=self.call_timeout_s))

    def flush(self) -> None:
        """Nothing to do: every write is durable in the bucket when it returns."""

    @property
    def embedder(self) -> _embedding.Embedder | None:
        """The embedder text is turned into vectors with, here in the router (``None``: vectors only)."""
        return self._embedder

    @property
    def readonly(self) -> bool:
        return False

    def now(self) -> float:
        """This router's wall-clock time, POSIX seconds (each slot keeps its own store time)."""
        return time.time()

    def metrics_text(self) -> str:
        """The shards' counters in the Prometheus text format."""
        lines = []
        for metric, key, what in (
            ("tierstore_cluster_slots_owned", "owned", "slots the shard owns"),
            ("tierstore_cluster_acked_writes_total", "acked", "writes acknowledged"),
            ("tierstore_cluster_log_appends_total", "commits", "log objects appended"),
            ("tierstore_cluster_snapshots_total", "snapshots", "snapshots written"),
            ("tierstore_cluster_lease_checks_total", "lease_checks", "conditional GETs of a lease made to admit reads"),
            ("tierstore_cluster_s3_puts_total", "puts", "PUT requests sent"),
        ):
            lines += [f"# HELP {metric} {what}", f"# TYPE {metric} {'gauge' if key == 'owned' else 'counter'}"]
            for name, c in sorted(self.counters().items()):
                lines.append(f'{metric}{{shard="{name}"}} {c[key]}')
        return "\n".join(lines) + "\n"

    def counters(self) -> dict[str, dict[str, Any]]:
        """Per shard: acknowledged writes, log objects, replayed writes, bucket requests."""
        ray = _ray()
        with self._lock:
            handles = dict(self._handles)
        return {n: ray.get(h.counters.remote(), timeout=self.call_timeout_s) for n, h in handles.items()}

    def shard_pids(self) -> dict[str, int]:
        """Each live shard's process id on its node (``shard name -> pid``): to
        find a shard's process, e.g. to stop it (``kill PID`` on that node;
        the router then fails it over, see docs/cluster.md)."""
        ray = _ray()
        with self._lock:
            handles = dict(self._handles)
        return {n: ray.get(h.pid.remote(), timeout=self.call_timeout_s) for n, h in handles.items()}

    def close(self) -> None:
        """Stop this router's background sweeps and forget the cluster here
        (the shards keep running for other routers)."""
        self._background.stop()

    def shutdown(self) -> None:
        """Stop every shard (each releases its slots first) and, if this
        router started Ray, Ray too. The bucket keeps everything."""
        self._background.stop()
        ray = _ray()
        with self._placing:
            with self._lock:
                handles = dict(self._handles)
            for name, handle in handles.items():
                try:
                    ray.get(handle.close.remote(), timeout=60)
                except Exception:  # noqa: BLE001 - a dead shard has nothing to release
                    pass
                ray.kill(handle)
                with self._lock:
                    self._handles.pop(name, None)
        if self._started_ray:
            ray.shutdown()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _merge_reports(reports: list[SweepReport], elapsed: float) -> SweepReport:
    """The per-slot sweep reports summed into one."""
    total = SweepReport(now=max((r.now for r in reports), default=time.time()))
    for f in fields(SweepReport):
        if f.name in ("examined", "kept", "demoted", "archived", "deleted", "compacted", "remaining_due"):
            setattr(total, f.name, sum(getattr(r, f.name) for r in reports))
    for r in reports:
        total.errors.extend(r.errors)
        for t, counts in r.by_type.items():
            into = total.by_type.setdefault(t, {})
            for key, n in counts.items():
                into[key] = into.get(key, 0) + n
    total.elapsed_s = elapsed
    return total


def _merge_integrity(parts: list[tuple[int, IntegrityReport]]) -> IntegrityReport:
    """The slots' integrity reports as one; every problem says its slot in ``where``."""
    total = IntegrityReport()

    def tagged(slot: int, problems: list[Problem]) -> list[Problem]:
        return [replace(p, where=f"slot {slot:05d}: {p.where}") for p in problems]

    for slot, report in parts:
        total.problems.extend(tagged(slot, report.problems))
        total.in_flight.extend(tagged(slot, report.in_flight))
        total.repaired.extend(f"slot {slot:05d}: {r}" for r in report.repaired)
        for key, n in report.checked.items():
            total.checked[key] = total.checked.get(key, 0) + n
    return total


class _ShardActor(Shard):
    """The shard as Ray sees it: with ``info`` for routers that connect later."""

    def __init__(
        self,
        name: str,
        bucket: BucketConfig,
        *,
        dim: int,
        num_slots: int,
        root: str,
        policy: Policy | None = None,
        snapshot_every: int = 100,
        lease_check_s: float = DEFAULT_LEASE_CHECK_S,
        embedder: str | None = None,
        keep_history: bool = False,
        takeover_threads: int = DEFAULT_TAKEOVER_THREADS,
    ) -> None:
        super().__init__(
            name,
            bucket,
            dim=dim,
            num_slots=num_slots,
            root=root,
            policy=policy,
            snapshot_every=snapshot_every,
            lease_check_s=lease_check_s,
            keep_history=keep_history,
            acquire_threads=takeover_threads,
        )
        # embedder: the record (name, dim) of the embedder the cluster's text is embedded with, or None
        self._info = {
            "dim": dim,
            "num_slots": num_slots,
            "bucket": bucket,
            "policy": policy,
            "root": root,
            "snapshot_every": snapshot_every,
            "lease_check_s": lease_check_s,
            "embedder": embedder,
            "keep_history": keep_history,
            "takeover_threads": takeover_threads,
        }

    def info(self) -> dict[str, Any]:
        return dict(self._info)
