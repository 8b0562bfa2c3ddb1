"""``python -m tokenfleet.operator`` (also ``tokenfleet operator``): run the kopf operator."""

from __future__ import annotations

import argparse
import logging
import sys

import kopf


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
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    kopf.configure(verbose=args.verbose, log_prefix=True)
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    import tokenfleet.operator.handlers  # noqa: F401 - registers the handlers with kopf

    kopf.run(
        standalone=True,  # one operator per cluster; no peering objects to manage
        clusterwide=not args.namespace,
        namespaces=args.namespace,
        liveness_endpoint=args.liveness or None,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
