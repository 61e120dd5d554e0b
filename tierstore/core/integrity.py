"""Verify a store's data against its checksums, and repair what can be rebuilt.

``verify(store)`` changes nothing. It checks

* the SQLite catalog (``PRAGMA quick_check``) and its bookkeeping: cold rows
  without a location, warm rows without a known shard, archive batches still
  pending (a crash or an outage interrupted them; the next sweep finishes them);
* every warm shard against its manifest (SHA-256 of each file, every field);
* every hot checkpoint against its manifest (SHA-256);
* every archive object the catalog points at: the whole object (magic, header,
  index, every frame's CRC32) and each cold memory's record at the catalog's
  offset;
* the cold index (``cold_codes``): every cold memory has a sign code of the
  right size and nothing else has one; checked against each archived vector:
  the sign code, the place it keeps of the vector, and the int8 code where
  there is one (it decodes to within a cosine of 0.99 of the vector; a NULL
  one is no error: rows archived before them have none);
* every tombstone the catalog lists as written (present, and parses);
* the keyword index: every memory in it, nothing else;
* each namespace's archive layout (``tiers/cold_relayout.py``): the objects
  it lists still exist (a collected object leaves the list); one that does
  not (a catalog restored from a copy, objects collected by earlier code) is
  reported in ``in_flight``: the next ``compact_cold`` lays the namespace out
  again.

``repair(store)`` rebuilds what is derived from the catalog: a damaged warm
shard is rewritten from the vectors the catalog keeps for warm memories; a
damaged hot checkpoint is rewritten from the namespace rebuilt from the
catalog; pending archive batches are finished; a missing or damaged
tombstone is written again from the catalog's list; the keyword index is
rebuilt from the catalog's text; a layout's list loses the objects that are
gone; a cold-index row that is missing or does not match its archived vector
is written again from that vector. An archive object holds
the only copy of its cold memories' embeddings, so a damaged or missing one is
reported with the memories it affects and never "repaired" by guesswork (a
record that still decodes can be restored; the rest are lost).

``verify`` takes a consistent view of a live store: it holds the sweep lock
(no sweep, restore, compaction or repair runs meanwhile) and the hot tier's
checkpoint lock, and re-reads the catalog before it reports an archive object
missing or damaged (a ``delete()`` may have emptied and collected it since the
object was listed). Work that is interrupted but not damaged (an archive
batch still pending after a crash or an outage, a tombstone not yet written)
is reported in ``in_flight``, not as a problem: the next sweep finishes it.

``TierStore.verify()`` / ``TierStore.repair()`` are thin wrappers over these
(see docs/operations.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from tierstore.core.engine import Engine, engine_of
from tierstore.errors import CorruptDataError, ObjectNotFoundError, ObjectStoreError
from tierstore.kernels import TIER_COLD, TIER_WARM
from tierstore.records import SweepReport
from tierstore.storage import keyword_index
from tierstore.tiers import cold_relayout, tombstones
from tierstore.tiers.archive import vector_crc
from tierstore.tiers.cold import Location
from tierstore.tiers.cold_index import CODES_COMPLETE, code8_agrees, encode_codes, query_code8, query_codes
from tierstore.tiers.hot import HotNamespace

__all__ = ["IntegrityReport", "Problem", "repair", "verify"]


@dataclass(frozen=True)
class Problem:
    """One thing wrong. ``kind``: catalog, warm, hot, cold, cold_index, cold_layout, tombstone or
    keyword_index.
    ``where``: the file, shard, namespace or object key. ``memories``:
    ``ns/id`` of the memories that cannot be read back because of it (cold
    damage)."""

    kind: str
    where: str
    message: str
    repairable: bool
    memories: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"[{self.kind}] {self.message}"


@dataclass
class IntegrityReport:
    """``problems``: damage. ``in_flight``: interrupted work the next sweep
    finishes (not damage; ``ok`` ignores it). ``checked``: what was read."""

    problems: list[Problem] = field(default_factory=list)
    checked: dict[str, int] = field(default_factory=dict)
    repaired: list[str] = field(default_factory=list)
    in_flight: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        def rows(items: list[Problem]) -> list[dict[str, Any]]:
            return [
                {
                    "kind": p.kind,
                    "where": p.where,
                    "message": p.message,
                    "repairable": p.repairable,
                    "memories": list(p.memories),
                }
                for p in items
            ]

        return {
            "ok": self.ok,
            "checked": dict(self.checked),
            "repaired": list(self.repaired),
            "problems": rows(self.problems),
            "in_flight": rows(self.in_flight),
        }


def verify(store: Any) -> IntegrityReport:
    """Check everything listed in the module docstring; change nothing.
    ``store``: a TierStore or its engine."""
    eng = engine_of(store)
    eng.check_open()
    with eng.sweep_lock:
        return _verify(eng)


def _verify(eng: Engine) -> IntegrityReport:
    """:func:`verify`, the sweep lock held by the caller."""
    report = IntegrityReport()
    _verify_catalog(eng, report)
    _verify_warm(eng, report)
    _verify_hot(eng, report)
    _verify_cold(eng, report)
    _verify_cold_codes(eng, report)
    _verify_layout(eng, report)
    _verify_tombstones(eng, report)
    _verify_keywords(eng, report)
    return report


def repair(store: Any, *, now: float | None = None) -> IntegrityReport:
    """Verify, rebuild what the catalog can rebuild, and verify again.

    Returns the final report (what is still wrong) with ``repaired`` listing
    what was done. Holds the sweep lock, so no sweep runs meanwhile."""
    eng = engine_of(store)
    eng.check_open()
    now = eng.now() if now is None else now
    done: list[str] = []
    with eng.sweep_lock:
        first = _verify(eng)
        # Warm shards: rebuilt from the catalog's vectors (one new shard per namespace).
        bad_shards: dict[str, set[str]] = {}
        for p in first.problems:
            if p.kind == "warm" and p.repairable:
                ns, name = p.where.split("\x00", 1)
                bad_shards.setdefault(ns, set()).add(name)
        for ns, names in sorted(bad_shards.items()):
            infos = [i for i in eng.warm.shards(ns) if i.name in names]
            if infos:
                eng.migrator.rebuild_shards(ns, infos, now)
                done.extend(f"rebuilt warm shard {i.name} from the catalog" for i in infos)
        # Hot checkpoints: the namespace is rebuilt from the catalog at load when its
        # checkpoint fails its checksum; write a good checkpoint now.
        for p in first.problems:
            if p.kind == "hot" and p.repairable:
                space = eng.hot.ensure(p.where)
                with eng.hot.checkpoint_lock, space.lock.read():
                    space.save_checkpoint(eng.hot.directory)
                done.append(f"rewrote the hot checkpoint of namespace {p.where!r}")
        # Tombstones: written again from the catalog's list.
        for p in first.problems:
            if p.kind == "tombstone":
                rows = eng.catalog.query("SELECT ns, id, deleted_at FROM tombstones WHERE key = ?", (p.where,))
                if not rows:  # not expected: verify found it, under the same sweep lock
                    continue
                eng.cold.store.put(p.where, tombstones.encode([tombstones.Tombstone(*r) for r in rows]))
                done.append(f"rewrote tombstone {p.where} from the catalog")
        # Cold-index codes: the bad ones dropped, every missing one written from its archived vector.
        if any(p.kind == "cold_index" for p in first.problems + first.in_flight):
            try:
                wrong = [m for p in first.problems if p.kind == "cold_index" for m in p.memories]
                dropped = eng.catalog.write(lambda conn: _drop_bad_codes(eng, conn, wrong))
                written = eng.migrator.backfill_codes()
                done.append(f"cold index: dropped {dropped} bad codes, wrote {written} from the archive")
            except (ObjectStoreError, CorruptDataError, OSError) as exc:
                done.append(f"cold-index codes not written: {type(exc).__name__}: {exc}")
            eng.cold_index.invalidate()
        # Layouts: the objects that are gone dropped from their lists.
        for p in first.in_flight:
            if p.kind == "cold_layout":
                gone = eng.catalog.write(partial(cold_relayout.forget_gone, ns=p.where))
                done.append(f"dropped {gone} objects that are gone from the layout of namespace {p.where!r}")
        # The keyword index: rebuilt from the catalog's text.
        if any(p.kind == "keyword_index" for p in first.problems):
            eng.catalog.write(keyword_index.rebuild_index)
            done.append("rebuilt the keyword index from the catalog")
        # Pending archive batches: finished as the next sweep would.
        if any(p.where.startswith("archive/") for p in first.in_flight):
            sweep_report = SweepReport(now=now)
            try:
                eng.migrator.recover(now, sweep_report)
                done.append("finished pending archive batches")
            except (ObjectStoreError, CorruptDataError, OSError) as exc:
                done.append(f"pending archive batches not finished: {type(exc).__name__}: {exc}")
        final = _verify(eng)
    final.repaired = done
    return final


# -- the checks ---------------------------------------------------------------------------


def _verify_keywords(eng: Engine, report: IntegrityReport) -> None:
    """The keyword index (``memory_text``) holds every memory and nothing
    else: a memory missing from it would never be found by its words, an
    entry without a memory is noise. Repairable: rebuilt from the catalog."""
    cat = eng.catalog
    if not cat.has_table("memory_text"):
        return
    found = keyword_index.check_index(cat)
    report.checked["keyword_index"] = int(cat.query("SELECT count(*) FROM memory_text_docsize")[0][0])
    for what, rids in (("missing", found["missing"]), ("extra", found["extra"])):
        if rids:
            desc = (
                "memories missing from the keyword index"
                if what == "missing"
                else "keyword-index entries without a memory"
            )
            report.problems.append(
                Problem(
                    "keyword_index",
                    "memory_text",
                    f"{len(rids)}{'+' if len(rids) >= 1000 else ''} {desc} "
                    f"(rids {', '.join(map(str, rids[:5]))}{', ...' if len(rids) > 5 else ''}); repair rebuilds it",
                    repairable=True,
                )
            )


def _verify_catalog(eng: Engine, report: IntegrityReport) -> None:
    cat = eng.catalog
    result = [r[0] for r in cat.query("PRAGMA quick_check")]
    if result != ["ok"]:
        report.problems.append(
            Problem(
                "catalog",
                str(cat.path),
                f"catalog {cat.path}: quick_check: " + "; ".join(map(str, result[:5])),
                repairable=False,
            )
        )
    for key, count in cat.query("SELECT key, count FROM archives WHERE state = 'pending'"):
        report.in_flight.append(
            Problem(
                "catalog",
                key,
                f"archive batch {key} ({count} memories) is pending: interrupted by a crash or an "
                "object-store error; the next sweep finishes it",
                repairable=True,
            )
        )
    for key, ns, mid in cat.query("SELECT key, ns, id FROM tombstones WHERE state = 'pending'"):
        report.in_flight.append(
            Problem(
                "tombstone",
                key,
                f"the tombstone of deleted memory {ns}/{mid} is not written yet (an object-store "
                "error, or a delete under way); the next sweep writes it",
                repairable=True,
            )
        )
    for ns, mid in cat.query(
        "SELECT ns, id FROM memories WHERE tier = ? AND (cold_key IS NULL OR cold_offset IS NULL"
        " OR cold_length IS NULL)",
        (TIER_COLD,),
    ):
        report.problems.append(
            Problem(
                "catalog",
                f"{ns}/{mid}",
                f"cold memory {ns}/{mid} has no archive location",
                repairable=False,
                memories=(f"{ns}/{mid}",),
            )
        )
    for ns, mid in cat.query(
        "SELECT m.ns, m.id FROM memories m WHERE m.tier = ? AND (m.shard IS NULL OR NOT EXISTS"
        " (SELECT 1 FROM shards s WHERE s.shard = m.shard))",
        (TIER_WARM,),
    ):
        report.problems.append(
            Problem(
                "catalog",
                f"{ns}/{mid}",
                f"warm memory {ns}/{mid} is in no known shard",
                repairable=False,
                memories=(f"{ns}/{mid}",),
            )
        )
    report.checked["memories"] = int(cat.query_one("SELECT count(*) FROM memories")[0])  # type: ignore[index]


def _verify_warm(eng: Engine, report: IntegrityReport) -> None:
    n = 0
    for (ns,) in eng.catalog.query(
        "SELECT DISTINCT ns FROM shards ORDER BY ns"
    ):  # shards change only under the sweep lock
        for info in eng.warm.shards(ns):
            n += 1
            err = eng.warm.verify(info)
            if err is not None:
                report.problems.append(Problem("warm", f"{ns}\x00{info.name}", err, repairable=True))
    report.checked["warm_shards"] = n


def _verify_hot(eng: Engine, report: IntegrityReport) -> None:
    hot = eng.hot
    n = 0
    if not hot.directory.exists():
        report.checked["hot_checkpoints"] = 0
        return
    for ns in eng.catalog.namespaces():
        space = HotNamespace(ns, hot.dim, hot.settings, hot.vocab, hot.type_names)
        try:
            with hot.checkpoint_lock:  # not while a checkpoint() is half written
                ckpt = space.load_checkpoint(hot.directory)
        except CorruptDataError as exc:
            n += 1
            report.problems.append(Problem("hot", ns, str(exc), repairable=True))
            continue
        except (OSError, ValueError, RuntimeError) as exc:  # hnswlib refusing a file that passed
            n += 1
            report.problems.append(
                Problem("hot", ns, f"hot checkpoint of {ns!r} does not load: {exc}", repairable=True)
            )
            continue
        if ckpt is not None:
            n += 1
    report.checked["hot_checkpoints"] = n


def _verify_tombstones(eng: Engine, report: IntegrityReport) -> None:
    """Every tombstone the catalog says was written is in the object store and
    parses (a rebuild stops at a damaged one)."""
    rows = eng.catalog.query("SELECT DISTINCT key FROM tombstones WHERE state = 'written' ORDER BY key")
    for (key,) in rows:
        try:
            tombstones.decode(eng.cold.store.get(key), f"tombstone object {key}")
        except ObjectNotFoundError:
            report.problems.append(Problem("tombstone", key, f"tombstone object {key} is missing", repairable=True))
        except CorruptDataError as exc:
            report.problems.append(Problem("tombstone", key, str(exc), repairable=True))
    report.checked["tombstones"] = len(rows)


_COLD_SQL = (
    "SELECT ns, id, cold_key, cold_offset, cold_length FROM memories WHERE tier = ? AND cold_key IS NOT NULL"
    " AND cold_offset IS NOT NULL AND cold_length IS NOT NULL"
)


def _verify_cold(eng: Engine, report: IntegrityReport) -> None:
    by_key: dict[str, list[tuple[str, str, Location]]] = {}
    for ns, mid, key, off, length in eng.catalog.query(_COLD_SQL + " ORDER BY cold_key, cold_offset", (TIER_COLD,)):
        by_key.setdefault(key, []).append((ns, mid, Location(key, off, length)))
    codes = _codes_with_places(eng)
    rid_of = {
        (ns, mid): rid
        for ns, mid, rid in eng.catalog.query("SELECT ns, id, rid FROM memories WHERE tier = ?", (TIER_COLD,))
    }

    # ns/id of memories whose codes are not their archived vector's (the sign code, or the int8
    # code where there is one), or whose vector is not where the code's row says (a search would
    # read its whole record)
    wrong_codes: list[str] = []

    def code_agrees(ns_of: dict[str, str], code8s: dict[int, Any]) -> Any:
        def check(mid: str, rec: dict[str, Any], frame: bytes) -> None:
            rid = rid_of.get((ns_of[mid], mid), -1)
            got = codes.get(rid)
            if got is None:
                return
            code, at, crc = got
            emb = rec["embedding"]
            if (
                code != encode_codes(np.frombuffer(emb, "<f4").reshape(1, -1))[0]
                or (at, crc) != (None, None)
                and (type(at) is not int or at < 0 or frame[at : at + len(emb)] != emb or crc != vector_crc(emb))
                or rid in code8s
                and not code8_agrees(code8s[rid], emb)
            ):
                wrong_codes.append(f"{ns_of[mid]}/{mid}")

        return check

    for key, entries in by_key.items():
        ns_of = {mid: ns for ns, mid, _ in entries}
        # the int8 codes of this object's memories only: all of them at once would be 4 + dim bytes a memory
        code8s = query_code8(eng.catalog.query, [rid_of[(ns, mid)] for ns, mid, _ in entries if (ns, mid) in rid_of])
        problems, damaged = eng.cold.verify_batch(
            key, [(mid, loc) for _, mid, loc in entries], code_agrees(ns_of, code8s)
        )
        if problems:
            # A delete() (which does not wait for the sweep lock) may have emptied
            # and collected the object since it was listed: look again before
            # calling anything missing or damaged.
            entries = [
                (ns, mid, Location(k, off, length))
                for ns, mid, k, off, length in eng.catalog.query(
                    _COLD_SQL + " AND cold_key = ? ORDER BY cold_offset", (TIER_COLD, key)
                )
            ]
            if not entries:
                continue
            problems, damaged = eng.cold.verify_batch(key, [(mid, loc) for _, mid, loc in entries])
        if problems:
            ns_of = {mid: ns for ns, mid, _ in entries}
            report.problems.append(
                Problem(
                    "cold",
                    key,
                    "; ".join(problems[:3]) + (f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""),
                    repairable=False,
                    memories=tuple(f"{ns_of[m]}/{m}" for m in damaged),
                )
            )
    report.checked["archive_objects"] = len(by_key)
    report.checked["cold_memories"] = sum(len(v) for v in by_key.values())
    if wrong_codes:
        report.problems.append(
            Problem(
                "cold_index",
                "cold_codes",
                f"{len(wrong_codes)} cold-index codes do not match "
                "their memories' archived vectors (the sign code, or the int8 code), or the places they keep "
                "of those vectors in the records (a wrong code ranks its memory wrongly; a wrong place "
                "makes search read the whole record)",
                repairable=True,
                memories=tuple(wrong_codes),
            )
        )


def _verify_layout(eng: Engine, report: IntegrityReport) -> None:
    """Each namespace's layout lists only archive objects that exist (not
    damage: a namespace with gone objects in its list is laid out again by
    the next ``compact_cold``; ``repair`` drops them)."""
    laid = 0
    for ns, keys, gone in cold_relayout.layouts(eng.catalog):
        laid += len(keys) - len(gone)
        if gone:
            report.in_flight.append(
                Problem(
                    "cold_layout",
                    ns,
                    f"the archive layout of namespace {ns!r} lists {len(gone)} objects that are gone "
                    f"({sorted(gone)[0]}{', ...' if len(gone) > 1 else ''}): a catalog restored from a copy, or "
                    "objects collected by earlier code; the next compact_cold lays the namespace out again",
                    repairable=True,
                )
            )
    report.checked["cold_layout_objects"] = laid


def _codes_with_places(eng: Engine) -> dict[int, tuple[bytes, Any, Any]]:
    """``rid -> (code, vector_at, vector_crc)`` of every cold-index row
    (the places None where not kept: rows, or a read-only eng, from before them)."""
    cat = eng.catalog
    if not cat.has_table("cold_codes"):
        return {}
    return {rid: (code, at, crc) for rid, code, at, crc in query_codes(cat.query)}


_MISSING_CODES_SQL = (
    "SELECT count(*) FROM memories m LEFT JOIN cold_codes c ON c.rid = m.rid WHERE m.tier = ? AND c.rid IS NULL"
)
_STRAY_CODES_SQL = (
    "SELECT c.rid FROM cold_codes c LEFT JOIN memories m ON m.rid = c.rid"
    " WHERE m.rid IS NULL OR m.tier != ? OR m.ns != c.ns OR length(c.code) != ?"
)


def _verify_cold_codes(eng: Engine, report: IntegrityReport) -> None:
    """Every cold memory has a cold-index code of the right size, and no code
    belongs to anything else (a memory without one cannot be found by search).
    Codes missing from a eng archived before the index are interrupted
    work, written by sweeps; missing otherwise, damage that repair rewrites.
    Whether each code matches its archived vector is checked with the
    archive objects (``_verify_cold``)."""
    cat = eng.catalog
    if not cat.has_table("cold_codes"):  # a read-only look at a eng from before the index
        report.in_flight.append(
            Problem(
                "cold_index",
                "cold_codes",
                "this eng has no cold index yet: opened for writing, it gets one (sweeps write the codes)",
                repairable=True,
            )
        )
        return
    missing = int(cat.query_one(_MISSING_CODES_SQL, (TIER_COLD,))[0])  # type: ignore[index]
    width = 8 * int(eng.cold_index.words)
    stray = [r for (r,) in cat.query(_STRAY_CODES_SQL, (TIER_COLD, width))]
    if missing:
        msg = f"{missing} cold memories have no cold-index code: search cannot find them until they get one"
        if cat.get_meta("cold_codes") != CODES_COMPLETE:  # an older eng: sweeps are writing them
            report.in_flight.append(
                Problem(
                    "cold_index",
                    "cold_codes",
                    msg + " (archived before the cold index; sweeps write them, a few thousand at a time)",
                    repairable=True,
                )
            )
        else:
            report.problems.append(Problem("cold_index", "cold_codes", msg, repairable=True))
    if stray:
        report.problems.append(
            Problem(
                "cold_index",
                "cold_codes",
                f"{len(stray)} cold-index codes belong to no cold memory or have the wrong size",
                repairable=True,
            )
        )
    report.checked["cold_codes"] = int(cat.query_one("SELECT count(*) FROM cold_codes")[0])  # type: ignore[index]


def _drop_bad_codes(eng: Engine, conn: Any, wrong: Sequence[str]) -> int:
    """Delete stray codes and those of ``wrong`` (``ns/id``) memories; backfill writes them again."""
    bad = [r for (r,) in conn.execute(_STRAY_CODES_SQL, (TIER_COLD, 8 * int(eng.cold_index.words)))]
    for name in wrong:
        ns, mid = name.split("/", 1)
        bad += [r for (r,) in conn.execute("SELECT rid FROM memories WHERE ns = ? AND id = ?", (ns, mid))]
    conn.executemany("DELETE FROM cold_codes WHERE rid = ?", [(r,) for r in bad])
    return len(bad)
