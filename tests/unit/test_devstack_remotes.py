"""The local platform's remotes, without starting them: region-b's static file is one the
gateway loads (the example's chat-auto route without remotes, its classifier, one tenant known
only by its key's hash), keys are made once with owner-only modes in the chart's mount layout
and are what the Secrets hold, the chart install lists the Secrets to mount, the host gateway is
pointed at the keys, and `up`'s printout names both remotes (nothing without the platform)."""

from __future__ import annotations

import base64
import stat
from pathlib import Path

import yaml

from tokenfleet.devstack import __main__ as cli
from tokenfleet.devstack import chart, controlplane, platform, remotes
from tokenfleet.gateway import keys
from tokenfleet.gateway.config import StaticConfig

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
ENDPOINTS = {"chat-small": "http://127.0.0.1:1", "chat-large": "http://127.0.0.1:2"}


def test_region_b_serves_the_example_route_without_its_remotes(tmp_path: Path) -> None:
    doc = remotes.region_b_config(endpoints=ENDPOINTS, key="tfk-k", examples=EXAMPLES)
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(doc))
    config = StaticConfig.load(path)
    (route,) = config.routes
    assert route.name == "chat-auto" and route.remotes == [] and route.rules
    shipped = yaml.safe_load((EXAMPLES / "09-model-routes" / "route.yaml").read_text())["spec"]
    assert shipped["remotes"], "the example spills; region-b must not spill back"
    assert config.config_maps["chat-auto-classifier"]["weights.json"]
    (tenant,) = config.tenants
    assert tenant.name == "region-a" and tenant.api_key_hashes == [keys.hash_key("tfk-k")]
    assert "tfk-k" not in path.read_text()
    assert config.catalog().models.keys() >= set(ENDPOINTS)


def test_keys_are_made_once_owner_only_in_the_mount_layout(tmp_path: Path) -> None:
    first = remotes.ensure_key(tmp_path, "region-b-key")
    assert first.startswith(keys.PREFIX)
    path = tmp_path / "remote-keys" / "region-b-key" / "api-key"
    assert path.read_text() == first  # no newline: the file is the token
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.parent.stat().st_mode) == 0o700
    assert remotes.ensure_key(tmp_path, "region-b-key") == first
    listed = remotes.key_secrets(tmp_path, "tokenfleet-system")
    by_name = {s["metadata"]["name"]: s for s in listed["items"]}
    assert set(by_name) == {"region-b-key", "provider-key"}
    data = by_name["region-b-key"]["data"]["api-key"]
    assert base64.b64decode(data).decode() == first
    assert by_name["provider-key"]["metadata"]["namespace"] == "tokenfleet-system"


def test_the_platform_mounts_and_points_at_the_keys(tmp_path: Path) -> None:
    images = tmp_path / "images"
    images.mkdir()
    (images / "tokenfleet.tag").write_text("localhost/tokenfleet:1\n")
    (images / "redis.tag").write_text("localhost/redis:7\n")
    argv = chart.helm_argv(
        helm=Path("/helm"),
        chart=REPO / "charts" / "tokenfleet",
        images=images,
        ports=controlplane.DEFAULT_PORTS,
        health_port=1,
        metrics_port=2,
    )
    assert "gateway.remoteKeySecrets={region-b-key,provider-key}" in argv
    gateway = platform.gateway_component(
        state_dir=tmp_path, kubeconfig=tmp_path / "k", port=1, redis_port=2
    )
    assert gateway.env["TOKENFLEET_REMOTE_KEYS_DIR"] == str(tmp_path / "remote-keys")


def test_the_default_ports_are_the_examples_and_up_prints_them(tmp_path: Path) -> None:
    route = yaml.safe_load((EXAMPLES / "09-model-routes" / "route.yaml").read_text())["spec"]
    urls = {r["name"]: r["baseUrl"] for r in route["remotes"]}
    ports = controlplane.DEFAULT_PORTS
    assert urls == {
        "region-b": f"http://127.0.0.1:{ports.region_b}/v1",
        "provider": f"http://127.0.0.1:{ports.provider}/v1",
    }
    info = {"kubeconfig": "k", "remotes": urls}
    text = cli.usage_text(tmp_path, info)
    assert all(url in text for url in urls.values()) and "remote-keys" in text
    assert "spills to" not in cli.usage_text(tmp_path, {"kubeconfig": "k"})
