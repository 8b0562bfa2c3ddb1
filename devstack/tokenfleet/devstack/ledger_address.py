"""Where the usage ledger is, read off the gateway's Deployment as its pods would see it (pure).

The chart gives the gateway its Redis as ``TOKENFLEET_REDIS_URL`` — in-release Redis:
``redis://:$(TOKENFLEET_REDIS_PASSWORD)@<host>:<port>/0`` with the password from the Redis
Secret; external Redis: a literal URL or one from a Secret. A ``--redis`` argument beats the
variable, as in the gateway. So the URL is resolved exactly as the kubelet resolves a
container's environment: in order, ``value`` expanded with the variables before it,
``secretKeyRef`` from the Secret's data. Everything here is a function of the objects read;
:mod:`tokenfleet.devstack.ledger_discovery` reads them and decides how to reach the result.

    Deployment ──secret_names──► Secrets ──address──► Address(url, host, port)
                                                     │ host reachable?   yes: use url
                                                     │ a cluster Service? port-forward to it
                                                     └ neither: say exactly what to pass
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import ipaddress
import re
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

Obj = Mapping[str, Any]
#: The label the chart's gateway Deployment carries (its selector: stable across upgrades).
GATEWAY_SELECTOR = "app.kubernetes.io/name=tokenfleet-gateway"
GATEWAY_CONTAINER = "gateway"
URL_VARIABLE = "TOKENFLEET_REDIS_URL"
_REFERENCE = re.compile(r"\$\$|\$\((?P<name>[^)]*)\)")
_FORWARDING = re.compile(r"^Forwarding from 127\.0\.0\.1:(?P<port>\d+) -> ")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Address:
    """The gateway's Redis URL. ``url`` may hold the password: show ``shown`` instead."""

    url: str = dataclasses.field(repr=False)  # never in a message or a log line
    source: str  # where it was read, for messages: "Deployment NS/NAME"
    namespace: str  # the gateway's: a short Service name resolves there
    secrets: tuple[str, ...] = ()  # "NAME, key KEY" of each Secret value the URL was built from

    @property
    def host(self) -> str:
        return urllib.parse.urlsplit(self.url).hostname or ""

    @property
    def port(self) -> int:
        return urllib.parse.urlsplit(self.url).port or 6379

    @property
    def shown(self) -> str:
        """The URL with any password replaced by ``***``."""
        return redact(self.url)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Unknown:
    """No address: why, in words a user can act on."""

    reason: str


def redact(url: str) -> str:
    """``url`` without its password (``redis://:***@host:port/0``)."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: a defined variable's value, ``$$`` → ``$``, anything
    else (an undefined name, an unclosed ``$(``) left as written."""

    def one(match: re.Match[str]) -> str:
        name = match["name"]
        if name is None:
            return "$"
        return env.get(name, match[0])

    return _REFERENCE.sub(one, text)


def gateway(deployments: Sequence[Obj]) -> Obj | None:
    """The gateway Deployment among those listed with :data:`GATEWAY_SELECTOR` (by name, so
    the choice is stable when several releases share a namespace)."""
    return min(deployments, key=lambda d: str(d["metadata"]["name"]), default=None)


def _container(deployment: Obj) -> Obj:
    containers: list[Obj] = deployment["spec"]["template"]["spec"].get("containers", [])
    named = [c for c in containers if c.get("name") == GATEWAY_CONTAINER]
    return (named or containers or [{}])[0]


def _secret_refs(container: Obj) -> list[Obj]:
    return [
        ref
        for var in container.get("env", [])
        if (ref := (var.get("valueFrom") or {}).get("secretKeyRef")) and ref.get("name")
    ]


def secret_names(deployment: Obj) -> list[str]:
    """The Secrets the gateway container's environment reads, in order of first use."""
    return list(dict.fromkeys(str(r["name"]) for r in _secret_refs(_container(deployment))))


def environment(container: Obj, *, secrets: Mapping[str, Obj]) -> dict[str, str]:
    """The container's variables as the kubelet resolves them: in order, each ``value``
    expanded with those before it, each ``secretKeyRef`` decoded from ``secrets`` (name →
    Secret). Variables from elsewhere (fields, resources, config maps) stay unset."""
    env: dict[str, str] = {}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = expand(str(var["value"] or ""), env)
            continue
        ref = (var.get("valueFrom") or {}).get("secretKeyRef") or {}
        data = (secrets.get(str(ref.get("name", ""))) or {}).get("data") or {}
        if ref.get("key") in data:
            try:
                env[var["name"]] = base64.b64decode(data[ref["key"]], validate=True).decode()
            except (binascii.Error, UnicodeDecodeError):
                continue  # not a value the kubelet would hand over either
    return env


def _argument(args: Sequence[str], flag: str) -> str | None:
    """The last value of ``flag`` (``--flag=V`` or ``--flag V``) in ``args``, as argparse."""
    found = None
    for i, arg in enumerate(args):
        if arg.startswith(flag + "="):
            found = arg[len(flag) + 1 :]
        elif arg == flag and i + 1 < len(args):
            found = args[i + 1]
    return found


def address(deployment: Obj, *, secrets: Mapping[str, Obj]) -> Address | Unknown:
    """The Redis URL the gateway's pods use: ``--redis`` in its arguments, else
    ``TOKENFLEET_REDIS_URL``, with every ``$(VAR)`` expanded as the kubelet would."""
    meta = deployment["metadata"]
    source = f"Deployment {meta.get('namespace', '')}/{meta['name']}"
    container = _container(deployment)
    env = environment(container, secrets=secrets)
    args = [
        expand(str(a), env) for a in [*container.get("command", []), *container.get("args", [])]
    ]
    url = _argument(args, "--redis") or env.get(URL_VARIABLE, "")
    missing = [n for n in secret_names(deployment) if n not in secrets]
    unread = f" (Secret {', '.join(missing)} could not be read)" if missing else ""
    if not url:
        return Unknown(reason=f"{source} gives its gateway no Redis URL{unread}")
    leftover = next((m for m in _REFERENCE.finditer(url) if m["name"]), None)
    if leftover is not None:
        return Unknown(
            reason=f"{source}: its Redis URL needs $({leftover['name']}), which could not be "
            f"resolved here{unread or ' (a Secret value that does not decode, or a field)'}"
        )
    return Address(
        url=url,
        source=source,
        namespace=str(meta.get("namespace", "")),
        secrets=tuple(f"{r['name']}, key {r.get('key', '')}" for r in _secret_refs(container)),
    )


def service_of(host: str, namespace: str) -> tuple[str, str] | None:
    """(Service, namespace) when ``host`` is a cluster Service's DNS name — ``NAME``,
    ``NAME.NS``, ``NAME.NS.svc`` or ``NAME.NS.svc.<cluster domain>`` — else None (an IP
    address, localhost, an external name)."""
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    parts = host.rstrip(".").split(".")
    if host in ("", "localhost") or not all(parts):
        return None
    if len(parts) == 1:
        return parts[0], namespace
    if len(parts) == 2 or parts[2] == "svc":
        return parts[0], parts[1]
    return None


def forwarded(url: str, local_port: int) -> str:
    """``url`` pointed at a local port-forward (127.0.0.1:``local_port``), password and
    database kept."""
    parts = urllib.parse.urlsplit(url)
    userinfo, _, _ = parts.netloc.rpartition("@")
    netloc = f"{userinfo}@127.0.0.1:{local_port}" if userinfo else f"127.0.0.1:{local_port}"
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def forwarding_port(line: str) -> int | None:
    """The local port of kubectl port-forward's ``Forwarding from 127.0.0.1:N -> P`` line."""
    match = _FORWARDING.match(line.strip())
    return int(match["port"]) if match else None


def port_forward_argv(
    *,
    kubectl: str,
    service: str,
    namespace: str,
    port: int,
    kubeconfig: str | None,
    context: str | None,
) -> list[str]:
    """``kubectl port-forward`` to the Service's ``port`` from a free local loopback port."""
    argv = [kubectl, "port-forward", "--namespace", namespace, f"svc/{service}", f":{port}"]
    argv += ["--address", "127.0.0.1"]
    if kubeconfig:
        argv += ["--kubeconfig", kubeconfig]
    if context:
        argv += ["--context", context]
    return argv


def what_to_pass(found: Address) -> str:
    """What to pass instead when ``found`` cannot be reached from here (no password shown)."""
    parts = urllib.parse.urlsplit(found.url)
    credentials = ":PASSWORD@" if parts.password is not None else ""
    hint = (
        f"pass --redis {parts.scheme}://{credentials}HOST:PORT{parts.path or '/0'} "
        f"(or set {URL_VARIABLE}), HOST:PORT being where {found.host}:{found.port} "
        "can be reached from here"
    )
    if credentials and found.secrets:
        hint += f"; the password is in Secret {found.namespace}/{found.secrets[0]}"
    return hint
