"""The ``tokenfleet`` command: one entry point whose subcommands load only what they need."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable

#: The exit status of a command whose reader went away (``… | head``): a shell reports 128 +
#: SIGPIPE for a process the signal ended, as kubectl (Go) and coreutils end.
SIGPIPE_EXIT = 128 + signal.SIGPIPE

USAGE = """usage: tokenfleet COMMAND [ARGS]

commands:
  operator [--namespace NS] [--liveness URL] [--verbose]
                       run the kopf operator (uses $KUBECONFIG or in-cluster credentials)
  gateway [--config FILE] [--port 8080] [--workers N] [--redis URL]
                       run the OpenAI-compatible gateway (Kubernetes or static mode)
  tenant create-key NAME [-n NS] [--replace]
                       make an API key for a tenant: printed once, stored as a hash
  bench replica --url URL --model M [--rates 1,2,4] [--out P.json]
                       measure one endpoint across a rate sweep: a profile and a plot
  plan --workload W.yaml --profile P.json
                       size a fleet from token-level traffic and a measured replica profile
  plan --disaggregation D.yaml [--profile P.json] [--simulate]
                       a combined pool or prefill + decode pools: which wins, what binds
  simulate SCENARIO.yaml [--scaler S] [--profile P.json] [--out DIR]
                       replay traffic against a simulated fleet under each scaling policy
  simulate --disaggregation D.yaml [--profile P.json]
                       size and simulate a combined pool against prefill + decode pools
  route train-classifier PROMPTS.jsonl -o OUT [--configmap NAME] [--seed 0]
                       train a ModelRoute's prompt classifier; prints held-out accuracy
  usage [--since 24h] [--tenant NS/NAME] [-o table|json|csv] [--cost] [--plot P.png]
        [--redis URL | --kubeconfig F --context C -n NS]
                       usage per tenant, model, pool and outcome from the ledger (found
                       through the cluster: the gateway's Redis); --cost allocates the
                       pools' GPU-hours (idle and failed work as own lines)
  dev up|down|status   the local platform (same as make up / make down)
  crds --write|--check DIR
                       render the CustomResourceDefinitions from tokenfleet.api
"""


def closed_stdout_is_quiet(command: Callable[[], int]) -> int:
    """Run ``command``; if its reader closes stdout (``… | head``), end quietly with 141.

    Python ignores SIGPIPE, so a write to a closed pipe raises BrokenPipeError: a traceback,
    and at exit a second complaint when the interpreter flushes stdout again. Flushing here
    makes the last buffered write fail inside the guard; stdout then points at /dev/null so the
    interpreter's own flush has nowhere to fail.
    """
    try:
        code = command()
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return SIGPIPE_EXIT
    return code


def main(argv: list[str] | None = None) -> int:
    """The ``tokenfleet`` command; a closed stdout ends it quietly (see
    :func:`closed_stdout_is_quiet`)."""
    args = sys.argv[1:] if argv is None else argv
    return closed_stdout_is_quiet(lambda: dispatch(args))


def dispatch(args: list[str]) -> int:
    """Dispatch to a subcommand's own ``main``."""
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command == "operator":
        from tokenfleet.operator.__main__ import main as operator

        return operator(rest)
    if command == "gateway":
        from tokenfleet.gateway.__main__ import main as gateway

        return gateway(rest)
    if command == "tenant":
        from tokenfleet.gateway.key_secrets import main as tenant

        return tenant(rest)
    if command == "bench" and rest[:1] == ["replica"]:
        from tokenfleet.capacity.replica_bench import main as bench_replica

        return bench_replica(rest[1:])
    if command == "plan":
        from tokenfleet.capacity.__main__ import main as plan

        return plan(rest)
    if command == "simulate":
        from tokenfleet.sim.__main__ import main as simulate

        return simulate(rest)
    if command == "route" and rest[:1] == ["train-classifier"]:
        from tokenfleet.gateway.route_training import main as train_classifier

        return train_classifier(rest[1:])
    if command == "usage":
        from tokenfleet.devstack.usage_report import main as usage_report

        return usage_report(rest)
    if command == "dev":
        from tokenfleet.devstack.__main__ import main as dev

        return dev(rest)
    if command == "crds":
        from tokenfleet.api.crd import main as crds

        return crds(rest)
    print(f"tokenfleet: unknown command {command!r}\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
