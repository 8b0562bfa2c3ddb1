"""Finding the usage ledger from wherever ``tokenfleet usage`` runs, with nothing but a kubeconfig.

In order:

1. ``--redis`` / ``$TOKENFLEET_REDIS_URL``, as given.
2. The gateway's Deployment in TokenFleet's namespace (``tokenfleet-system`` unless told),
   read through the kubeconfig with the Secrets its environment names: the URL its pods get
   (:mod:`tokenfleet.devstack.ledger_address`). Used directly when that host answers from here
   (``make up``: Redis on loopback); when it does not and it is a cluster Service (a real
   cluster: ``tokenfleet-redis.<ns>.svc``), through ``kubectl port-forward`` to that Service
   for as long as the command runs; otherwise an error saying exactly what to pass.
3. ``redis-url`` beside the kubeconfig: ``make up`` without the real node runs Redis as a host
   process, which no cluster object describes; it writes the URL there (mode 0600).

No password is printed or logged: messages show the URL redacted.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import shutil
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import kubernetes

from tokenfleet import kubeapi
from tokenfleet.devstack import chart, ledger_address

#: The local platform's Redis URL, beside its kubeconfig (written by ``make up``).
LOCAL_URL_FILE = "redis-url"
#: Seconds to wait for Redis to accept a connection: on loopback or a routed network it takes
#: milliseconds; a cluster-internal name from outside fails to resolve at once.
REACH_SECONDS = 2.0
#: Seconds for kubectl port-forward to report its local port (it asks the API server first).
FORWARD_SECONDS = 20.0


class NotFound(Exception):
    """No usable ledger; the message says what to pass instead."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Where:
    """Where to look: what the user passed."""

    redis: str = ""  # --redis or $TOKENFLEET_REDIS_URL: wins when set
    kubeconfig: str | None = None  # None: $KUBECONFIG, else ~/.kube/config
    context: str | None = None
    namespace: str = chart.NAMESPACE  # where TokenFleet (its gateway) is installed


@contextlib.asynccontextmanager
async def ledger_url(where: Where) -> AsyncIterator[str]:
    """The ledger's Redis URL, valid inside the ``async with`` (a port-forward ends with it)."""
    if where.redis:
        yield where.redis
        return
    found = await _from_cluster(where)
    if isinstance(found, ledger_address.Address):
        async with _reach(found, where) as url:
            yield url
        return
    local = _local_file(where)
    if local is not None and local.is_file():
        yield local.read_text().strip()
        return
    beside = f"; no {local}" if local is not None else ""
    raise NotFound(
        f"no ledger found: {found.reason}{beside}. Pass --redis URL or set "
        "TOKENFLEET_REDIS_URL (or --namespace, if TokenFleet is installed elsewhere)"
    )


async def _from_cluster(where: Where) -> ledger_address.Address | ledger_address.Unknown:
    """The gateway Deployment's Redis URL, read through the kubeconfig."""
    ns = where.namespace
    selector = urllib.parse.quote(ledger_address.GATEWAY_SELECTOR)
    async with aiohttp.ClientSession() as session:
        try:
            config = Path(where.kubeconfig) if where.kubeconfig else None
            api = kubeapi.KubeApi.from_kubeconfig(config, session, context=where.context)
            listed = await api.call(
                "GET", f"/apis/apps/v1/namespaces/{ns}/deployments?labelSelector={selector}"
            )
            deployment = ledger_address.gateway(listed.get("items", []))
            if deployment is None:
                return ledger_address.Unknown(
                    reason=f"no TokenFleet gateway Deployment "
                    f"({ledger_address.GATEWAY_SELECTOR}) in namespace {ns}"
                )
            secrets = {}
            for name in ledger_address.secret_names(deployment):
                # unreadable (RBAC, gone): address() names it in its reason
                with contextlib.suppress(kubeapi.ApiError):
                    secrets[name] = await api.call("GET", f"/api/v1/namespaces/{ns}/secrets/{name}")
        except kubeapi.ApiError as exc:
            return ledger_address.Unknown(reason=f"listing Deployments in {ns}: {exc}")
        except (aiohttp.ClientError, TimeoutError) as exc:  # before OSError: some are both
            cause = getattr(exc, "os_error", None) or exc  # without aiohttp's SSL context repr
            return ledger_address.Unknown(reason=f"the API server did not answer ({cause!s})")
        except (kubernetes.config.ConfigException, OSError) as exc:
            return ledger_address.Unknown(reason=f"no usable kubeconfig ({exc})")
    return ledger_address.address(deployment, secrets=secrets)


@contextlib.asynccontextmanager
async def _reach(found: ledger_address.Address, where: Where) -> AsyncIterator[str]:
    """``found``'s URL if it answers from here, else one through a port-forward to its
    Service; NotFound naming what to pass when neither works."""
    if await _answers(found.host, found.port):
        yield found.url
        return
    unreachable = f"the gateway's Redis, {found.shown} ({found.source}), does not answer here"
    service = ledger_address.service_of(found.host, found.namespace)
    if service is None:
        raise NotFound(
            f"{unreachable} and is no Service of the cluster to port-forward to: "
            + ledger_address.what_to_pass(found)
        )
    name, namespace = service
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise NotFound(
            f"{unreachable}; reaching it through Service {namespace}/{name} needs kubectl on "
            f"PATH (kubectl port-forward), or {ledger_address.what_to_pass(found)}"
        )
    argv = ledger_address.port_forward_argv(
        kubectl=kubectl,
        service=name,
        namespace=namespace,
        port=found.port,
        kubeconfig=where.kubeconfig,
        context=where.context,
    )
    async with _port_forward(argv, what=f"Service {namespace}/{name}", found=found) as port:
        yield ledger_address.forwarded(found.url, port)


async def _answers(host: str, port: int) -> bool:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), REACH_SECONDS)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


@contextlib.asynccontextmanager
async def _port_forward(
    argv: list[str], *, what: str, found: ledger_address.Address
) -> AsyncIterator[int]:
    """Run ``kubectl port-forward``; yield its local port; stop it after."""
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    drains: list[asyncio.Task[bytes]] = []
    try:
        try:
            port = await asyncio.wait_for(_local_port(process.stdout), FORWARD_SECONDS)
        except TimeoutError:
            raise NotFound(
                f"kubectl port-forward to {what} reported no port in {FORWARD_SECONDS:.0f} s; "
                f"or {ledger_address.what_to_pass(found)}"
            ) from None
        if port is None:  # it exited: its reason is on stderr
            said = (await process.stderr.read()).decode(errors="replace").strip()
            raise NotFound(
                f"kubectl port-forward to {what} failed: {said or 'no output'}; or "
                + ledger_address.what_to_pass(found)
            )
        # kubectl goes on writing ("Handling connection for N"): read it so its pipes never fill
        drains = [asyncio.create_task(stream.read()) for stream in (process.stdout, process.stderr)]
        yield port
    finally:
        for task in drains:
            task.cancel()
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 5)
            except TimeoutError:
                process.kill()
                await process.wait()


async def _local_port(stdout: asyncio.StreamReader) -> int | None:
    """The port from kubectl's "Forwarding from 127.0.0.1:N" line; None if it exits first."""
    while line := await stdout.readline():
        port = ledger_address.forwarding_port(line.decode(errors="replace"))
        if port is not None:
            return port
    return None


def _local_file(where: Where) -> Path | None:
    """``redis-url`` beside the kubeconfig in use (``--kubeconfig``, else the first of
    $KUBECONFIG); None without either: nothing local to look at."""
    config = where.kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    return Path(config).expanduser().parent / LOCAL_URL_FILE if config else None
