"""``tokenfleet gateway`` (also ``python -m tokenfleet.gateway``): run the gateway.

Without --config it watches Kubernetes ($KUBECONFIG or in-cluster); with --config it serves a
static file. --workers N runs N processes on one port (SO_REUSEPORT) to use every core.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import sys
import tempfile
from pathlib import Path

from kubernetes.client import Configuration

from tokenfleet import kubeapi
from tokenfleet.gateway.config import Settings, StaticConfig
from tokenfleet.gateway.policy import trace_context

# Nothing here may import prometheus_client at module level: it chooses between in-memory and
# multiprocess values when first imported, and --workers must set PROMETHEUS_MULTIPROC_DIR first.


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tokenfleet gateway", description=__doc__)
    p.add_argument(
        "--config", type=Path, help="static mode: models, pools and tenants from this YAML"
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--workers", type=int, default=1, help="processes sharing the port")
    p.add_argument(
        "--redis", default=os.environ.get("TOKENFLEET_REDIS_URL"), help="redis://host:port/0"
    )
    p.add_argument(
        "--cache-redis",
        default=os.environ.get("TOKENFLEET_CACHE_REDIS_URL"),
        help="the response cache's own Redis (default: --redis's), so its evictions never "
        "touch quota state",
    )
    p.add_argument(
        "--quota-failure",
        choices=("open", "closed"),
        default=os.environ.get("TOKENFLEET_QUOTA_FAILURE", "open"),
        help="when Redis is down: serve with local limits (open) or refuse (closed)",
    )
    p.add_argument(
        "--replicas",
        type=int,
        default=int(os.environ.get("TOKENFLEET_GATEWAY_REPLICAS", "1")),
        help="gateway replicas sharing the quotas: with --workers, each process takes "
        "1/(replicas x workers) of every limit for its leases and fail-open local limits",
    )
    p.add_argument(
        "--body-timeout",
        type=float,
        default=30.0,
        help="seconds a client may take to send its body before 408",
    )
    p.add_argument(
        "--header-timeout",
        type=float,
        default=float(os.environ.get("TOKENFLEET_HEADER_TIMEOUT_SECONDS") or 15.0),
        help="seconds a connection may take to send a request's headers (slowloris)",
    )
    p.add_argument(
        "--write-stall",
        type=float,
        default=float(os.environ.get("TOKENFLEET_WRITE_STALL_SECONDS") or 30.0),
        help="seconds a client may read nothing of its answer before it counts as gone",
    )
    p.add_argument("--max-body-bytes", type=int, default=4 * 1024 * 1024)
    p.add_argument("--no-access-log", action="store_true")
    p.add_argument(
        "--zone",
        default=os.environ.get("TOKENFLEET_ZONE", ""),
        help="this replica's zone: same-zone workers are preferred",
    )
    p.add_argument(
        "--max-attempts", type=int, default=3, help="tries per request, retries included"
    )
    p.add_argument(
        "--retry-budget-percent",
        type=float,
        default=10.0,
        help="retries allowed as a percent of requests over a sliding 10 s window",
    )
    p.add_argument(
        "--scrape-interval",
        type=float,
        default=1.0,
        help="seconds between reads of each worker's /metrics (0: off)",
    )
    p.add_argument(
        "--adapter-listing-interval",
        type=float,
        default=3.0,
        help="seconds between reads of each worker's adapter-loader listing (0: off)",
    )
    p.add_argument(
        "--cold-start-seconds",
        type=float,
        default=30.0,
        help="hold requests this long when no replica is ready, then 503",
    )
    p.add_argument("--seed", type=int, default=None, help="routing random seed (replays)")
    p.add_argument(
        "--namespace",
        action="append",
        default=[],
        help="watch only this namespace (repeatable); default: the whole cluster",
    )
    return p


def serve(
    settings: Settings, source: StaticConfig | Configuration, *, namespaces: tuple[str, ...] = ()
) -> None:
    """One worker process: the app on a SO_REUSEPORT socket until SIGTERM, then drain.
    ``source``: a static catalog, or the Kubernetes connection to watch (in ``namespaces``
    only, when any)."""
    import uvloop
    from aiohttp import web

    from tokenfleet.gateway import app as gateway_app
    from tokenfleet.gateway import discovery
    from tokenfleet.gateway.state import STATE

    application = gateway_app.create_app(settings)
    application.cleanup_ctx.append(
        discovery.static_source(source)
        if isinstance(source, StaticConfig)
        else discovery.kubernetes_source(source, namespaces=namespaces)
    )

    async def draining(app: web.Application) -> None:
        app[STATE].draining = True  # /readyz says so while in-flight streams finish

    application.on_shutdown.append(draining)
    _tune_gc()
    web.run_app(
        application,
        host=settings.host,
        port=settings.port,
        reuse_port=True,
        access_log=None,
        handler_cancellation=True,
        shutdown_timeout=settings.drain_seconds,
        keepalive_timeout=settings.header_timeout_seconds,  # also bounds a first request's headers
        print=None,
        loop=uvloop.new_event_loop(),
    )


#: A young-generation collection every this many allocations, not CPython's 700: a request
#: allocates a few hundred container objects, almost all freed by reference counting, so the
#: default ran a collection every other request for nearly nothing to collect.
GC_YOUNG_THRESHOLD = 20_000


def _tune_gc() -> None:
    """Move everything made at start (modules, the app, the catalog) out of the collector's
    sight, and collect the young generation less often (see GC_YOUNG_THRESHOLD)."""
    import gc

    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        level=logging.INFO,
        format="%(message)s"
        if not sys.stderr.isatty()
        else "%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    if args.no_access_log:
        logging.getLogger("tokenfleet.gateway.access").setLevel(logging.WARNING)
    try:  # a tracing variable that cannot be used: said before anything starts
        trace_context.Settings.from_env(os.environ)
    except trace_context.SettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    source: StaticConfig | Configuration
    if args.config:
        source = StaticConfig.load(args.config)
    else:
        try:
            source = kubeapi.environment_configuration()
        except kubeapi.SettingsError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    settings = Settings.from_env(
        host=args.host,
        port=args.port,
        workers=args.workers,
        redis_url=args.redis,
        cache_redis_url=args.cache_redis,
        quota_failure=args.quota_failure,
        expected_replicas=args.replicas,
        access_log=not args.no_access_log,
        body_timeout_seconds=args.body_timeout,
        header_timeout_seconds=args.header_timeout,
        write_stall_seconds=args.write_stall,
        max_body_bytes=args.max_body_bytes,
        zone=args.zone,
        max_attempts=max(1, args.max_attempts),
        retry_budget_ratio=args.retry_budget_percent / 100,
        scrape_seconds=args.scrape_interval,
        adapter_listing_seconds=args.adapter_listing_interval,
        cold_start_seconds=args.cold_start_seconds,
        seed=args.seed,
    )
    if not settings.salt_secret:
        logging.warning(
            "no TOKENFLEET_SALT_SECRET(_FILE): cache_salt uses a per-start random key, "
            "so replicas will not share prefix-cache entries across restarts"
        )
        settings = dataclasses.replace(settings, salt_secret=os.urandom(32))
    namespaces = tuple(dict.fromkeys(args.namespace))
    if args.workers <= 1:
        serve(settings, source, namespaces=namespaces)
        return 0
    os.environ.setdefault(
        "PROMETHEUS_MULTIPROC_DIR", tempfile.mkdtemp(prefix="tf-gateway-metrics-")
    )
    children = []
    for _ in range(args.workers):
        pid = os.fork()
        if pid == 0:
            serve(settings, source, namespaces=namespaces)
            os._exit(0)
        children.append(pid)

    def forward(signum: int, _frame: object) -> None:
        for child in children:
            os.kill(child, signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)
    from prometheus_client import multiprocess

    for pid in children:
        os.waitpid(pid, 0)
        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]  # its gauges stop counting
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
