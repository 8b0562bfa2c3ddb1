"""``python -m tokenfleet.operator`` (also ``tokenfleet operator``): run the kopf operator."""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import threading

import kopf

from tokenfleet import kubeapi
from tokenfleet.operator import leadership


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tokenfleet operator", description=__doc__)
    parser.add_argument(
        "--namespace",
        action="append",
        default=[],
        help="watch only this namespace (repeatable); default: the whole cluster",
    )
    parser.add_argument(
        "--liveness",
        default="",
        help="serve kopf's liveness probe here, e.g. http://0.0.0.0:8080/healthz",
    )
    parser.add_argument(
        "--leader-election",
        default="",
        metavar="NAMESPACE/NAME",
        help="act only while holding this coordination.k8s.io Lease (replicas > 1)",
    )
    parser.add_argument("--lease-seconds", type=float, default=10.0, help="claim lifetime")
    parser.add_argument("--renew-seconds", type=float, default=2.0, help="renewal period")
    parser.add_argument(
        "--identity",
        default=os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}",
        help="this replica's name in the Lease (default: $POD_NAME)",
    )
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        # Loaded once up front: broken settings are one line, not kopf retrying a traceback; and
        # a kubeconfig's embedded certificates stay in memory for kopf's own login too.
        kubeapi.environment_configuration()
    except kubeapi.SettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    election = _election(parser, args, stop)
    kopf.configure(verbose=args.verbose, log_prefix=True)
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    import tokenfleet.operator.handlers  # noqa: F401 - registers the handlers with kopf

    kopf.run(
        standalone=True,  # no kopf peering: the Lease (--leader-election) elects the actor
        clusterwide=not args.namespace,
        namespaces=args.namespace,
        liveness_endpoint=args.liveness or None,
        memo=kopf.Memo(
            election=election, stop_flag=stop, namespaces=tuple(dict.fromkeys(args.namespace))
        ),
        stop_flag=stop,
    )
    # Lost the Lease: exit non-zero so the pod restarts as a standby with fresh state.
    return 1 if election is not None and election.lost_leadership else 0


def _election(
    parser: argparse.ArgumentParser, args: argparse.Namespace, stop: threading.Event
) -> leadership.Election | None:
    if not args.leader_election:
        return None
    namespace, _, name = args.leader_election.partition("/")
    if not namespace or not name:
        parser.error("--leader-election takes NAMESPACE/NAME")
    try:
        timing = leadership.Timing(
            lease_seconds=args.lease_seconds, renew_seconds=args.renew_seconds
        )
    except ValueError as exc:
        parser.error(str(exc))
    return leadership.Election(
        namespace=namespace, name=name, identity=args.identity, timing=timing, stop=stop
    )


if __name__ == "__main__":
    raise SystemExit(main())
