"""The local platform's remotes: a second region and a provider on loopback, for
examples/09-model-routes' ``chat-auto`` route to spill to (``make up`` starts them).

- ``region-b``: a second TokenFleet gateway in static mode (docs/gateway-static.yaml) with its
  own engines (one llm-d-inference-sim per model) for ``chat-small`` and ``chat-large``, the
  example's ``chat-auto`` rules and classifier, without remotes (a region does not spill back),
  and one tenant, ``region-a``: the main gateway, calling with that tenant's key.
- ``provider``: :mod:`tokenfleet.devstack.provider` in front of one engine serving
  ``provider-large``, standing in for a hosted OpenAI-compatible API.

Each key is generated once into ``<state>/remote-keys/<secret>/api-key`` (0600): the layout
the chart mounts at /var/run/tokenfleet/remote-keys, so a host-process gateway reads them from
there (``TOKENFLEET_REMOTE_KEYS_DIR``). The same values go into Secrets ``region-b-key`` and
``provider-key`` in the gateway's namespace, for the chart's mount (``gateway.remoteKeySecrets``)
and the operator's RemotesReady. Beside each key, ``base-url`` binds it to the one URL it may be
sent to (the gateway sends a key nowhere else: docs/routes.md, Spill), written on every start
(the ports may change). Region-b's static file holds only its key's hash.
"""

from __future__ import annotations

import base64
import dataclasses
import secrets
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from tokenfleet.devstack import processes
from tokenfleet.devstack.controlplane import Component, Ports
from tokenfleet.gateway import keys

REGION_B = "region-b"
PROVIDER = "provider"
#: The Secrets examples/09-model-routes/route.yaml names, and the key in each.
REGION_B_SECRET = "region-b-key"  # noqa: S105 - a Secret's name, not a secret
PROVIDER_SECRET = "provider-key"  # noqa: S105 - a Secret's name, not a secret
SECRETS = (REGION_B_SECRET, PROVIDER_SECRET)
KEY = "api-key"
BASE_URL = "base-url"  # the URL each key is bound to (tokenfleet.gateway.remotes.BASE_URL_KEY)
#: Region-b serves the example's targets; the provider the model its remote asks for.
REGION_B_MODELS = ("chat-small", "chat-large")
PROVIDER_MODEL = "provider-large"
#: Who the main gateway is, to region-b: one tenant allowed the route (the route is the grant).
CALLER_TENANT = "region-a"
ROUTE_EXAMPLE = Path("09-model-routes")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Remotes:
    """What the stack starts (in order) and what it announces."""

    components: list[Component]
    urls: dict[str, str]  # remote → its base URL, as a route's baseUrl takes it


def keys_dir(state_dir: Path) -> Path:
    """Where the remotes' keys live: ``<secret>/<key>``, as the chart mounts them."""
    return state_dir / "remote-keys"


def ensure_key(state_dir: Path, secret: str, *, make: Callable[[], str] = keys.new_key) -> str:
    """The key of ``secret``, generated once (0600, in a 0700 folder) and kept across runs."""
    path = keys_dir(state_dir) / secret / KEY
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        keys_dir(state_dir).chmod(0o700)
        path.parent.chmod(0o700)
        path.touch(mode=0o600)
        path.write_text(make())  # no newline: the file is the bearer token, byte for byte
    return path.read_text().strip()


#: kubectl arguments that apply :func:`key_secrets`: server-side, so no copy of a key is kept
#: in a last-applied annotation.
APPLY = ("apply", "--server-side", "--field-manager=tokenfleet-devstack", "-f", "-")


def bind(state_dir: Path, secret: str, url: str) -> None:
    """Bind ``secret``'s key to ``url``: the only base URL the gateway will send it to."""
    path = keys_dir(state_dir) / secret / BASE_URL
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(url)


def _data(state_dir: Path, secret: str) -> dict[str, str]:
    folder = keys_dir(state_dir) / secret
    values = {KEY: ensure_key(state_dir, secret)}
    if (folder / BASE_URL).exists():
        values[BASE_URL] = (folder / BASE_URL).read_text().strip()
    return {k: base64.b64encode(v.encode()).decode() for k, v in values.items()}


def key_secrets(state_dir: Path, namespace: str) -> dict[str, Any]:
    """The Secrets the example's remotes name, holding the keys the stack generated and the
    URL each is bound to (a List)."""
    items = [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": secret,
                "namespace": namespace,
                "labels": {"app.kubernetes.io/part-of": "tokenfleet-devstack"},
            },
            "type": "Opaque",
            "data": _data(state_dir, secret),
        }
        for secret in SECRETS
    ]
    return {"apiVersion": "v1", "kind": "List", "items": items}


def engine(*, name: str, bin_dir: Path, model: str, port: int) -> Component:
    """One llm-d-inference-sim on loopback (it binds every interface; no host flag)."""
    argv = [str(bin_dir / "llm-d-inference-sim"), "--port", str(port), "--model", model]
    return Component(
        name=name,
        argv=[*argv, "--force-dummy-tokenizer"],  # else it looks the model up on a hub
        health_url=f"http://127.0.0.1:{port}/health",
        env={"POD_IP": "127.0.0.1"},
    )


def region_b_config(*, endpoints: Mapping[str, str], key: str, examples: Path) -> dict[str, Any]:
    """Region-b's static file: its engines, the example route without remotes, its classifier's
    weights, and the one tenant whose key the main gateway holds (only its hash here)."""
    folder = examples / ROUTE_EXAMPLE
    route = yaml.safe_load((folder / "route.yaml").read_text())["spec"]
    local = {k: v for k, v in route.items() if k not in ("remotes", "spillOn")}
    classifier = yaml.safe_load((folder / "classifier-configmap.yaml").read_text())
    return {
        "models": [{"name": model, "endpoints": [url]} for model, url in endpoints.items()],
        "tenants": [
            {
                "name": CALLER_TENANT,
                "apiKeyHashes": [keys.hash_key(key)],
                "allowedModels": [local["name"]],
                "priorityClass": "interactive",
            }
        ],
        "routes": [local],
        "configMaps": {classifier["metadata"]["name"]: classifier["data"]},
    }


def plan(*, state_dir: Path, bin_dir: Path, ports: Ports, examples: Path) -> Remotes:
    """The remotes' components, with their files written under ``<state>/<remote>/``."""
    folder = state_dir / REGION_B
    folder.mkdir(parents=True, exist_ok=True)
    engines = {
        model: engine(
            name=f"{REGION_B}-{model}", bin_dir=bin_dir, model=model, port=processes.free_port()
        )
        for model in REGION_B_MODELS
    }
    config = folder / "gateway.yaml"
    config.write_text(
        yaml.safe_dump(
            region_b_config(
                endpoints={m: c.health_url.removesuffix("/health") for m, c in engines.items()},
                key=ensure_key(state_dir, REGION_B_SECRET),
                examples=examples,
            )
        )
    )
    salt = folder / "gateway-salt"  # its own: another region shares no cache_salt key
    if not salt.exists():
        salt.touch(mode=0o600)
        salt.write_text(secrets.token_hex(32))
    gateway = Component(
        name=f"{REGION_B}-gateway",
        argv=[
            *(sys.executable, "-m", "tokenfleet.gateway"),
            *("--config", str(config), "--port", str(ports.region_b)),
        ],
        health_url=f"http://127.0.0.1:{ports.region_b}/healthz",
        env={"TOKENFLEET_SALT_SECRET_FILE": str(salt)},
    )
    provider_engine = engine(
        name=f"{PROVIDER}-engine", bin_dir=bin_dir, model=PROVIDER_MODEL, port=processes.free_port()
    )
    ensure_key(state_dir, PROVIDER_SECRET, make=lambda: "sk-local-" + secrets.token_urlsafe(32))
    provider = Component(
        name=PROVIDER,
        argv=[
            *(sys.executable, "-m", "tokenfleet.devstack.provider", "--port", str(ports.provider)),
            *("--upstream", provider_engine.health_url.removesuffix("/health")),
            *("--key-file", str(keys_dir(state_dir) / PROVIDER_SECRET / KEY)),
        ],
        health_url=f"http://127.0.0.1:{ports.provider}/healthz",
    )
    urls = {
        REGION_B: f"http://127.0.0.1:{ports.region_b}/v1",
        PROVIDER: f"http://127.0.0.1:{ports.provider}/v1",
    }
    bind(state_dir, REGION_B_SECRET, urls[REGION_B])
    bind(state_dir, PROVIDER_SECRET, urls[PROVIDER])
    return Remotes(components=[*engines.values(), gateway, provider_engine, provider], urls=urls)
