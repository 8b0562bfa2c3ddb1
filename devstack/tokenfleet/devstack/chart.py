"""`make up` installs TokenFleet with its Helm chart onto the real node (pure: values in, the
helm command line out; the stack runs it).

charts/tokenfleet/values-local.yaml holds what the local platform needs (hostNetwork, exec
probes, the API server's loopback address); the values here are the ones only known at
start-up: the ports chosen for this stack and the tags of the images tools/images.sh imported.
"""

from __future__ import annotations

from pathlib import Path

from tokenfleet.devstack import jaeger, remotes
from tokenfleet.devstack.controlplane import Ports

RELEASE = "tokenfleet"
NAMESPACE = "tokenfleet-system"


def image_ref(tag_file: Path) -> tuple[str, str]:
    """(repository, tag) of an image from tools/images.sh's ``<name>.tag`` file."""
    ref = tag_file.read_text().strip()
    repository, _, tag = ref.rpartition(":")
    return repository, tag


def helm_argv(
    *, helm: Path, chart: Path, images: Path, ports: Ports, health_port: int, metrics_port: int
) -> list[str]:
    """``helm upgrade --install`` of the chart with the local overlay and this stack's values."""
    repo, tag = image_ref(images / "tokenfleet.tag")
    redis_repo, redis_tag = image_ref(images / "redis.tag")
    values: dict[str, str | int] = {
        "image.repository": repo,
        "image.tag": tag,
        "kubernetesService.port": str(ports.apiserver),
        "operator.prometheusUrl": f"http://127.0.0.1:{ports.prometheus}",
        "operator.healthPort": health_port,
        "operator.metricsPort": metrics_port,  # hostNetwork: a free port, not the default
        "gateway.port": ports.gateway,
        "redis.port": ports.redis,
        "redis.image.repository": redis_repo,
        "redis.image.tag": redis_tag,
        "redis.image.pullPolicy": "Never",
        # the gateway's spans to the stack's Jaeger (host network: loopback is the host's)
        "gateway.tracing.endpoint": jaeger.Ports.of(ports).otlp_traces_url,
        "gateway.tracing.sampleRatio": jaeger.LOCAL_SAMPLE_RATIO,
    }
    argv = [
        str(helm), "upgrade", "--install", RELEASE, str(chart),
        "--namespace", NAMESPACE, "--create-namespace",
        "-f", str(chart / "values-local.yaml"),
    ]  # fmt: skip
    # No --wait: the gateway turns Ready only once it knows a tenant and a worker, which the
    # stack creates after the install; it waits for the gateway's liveness instead.
    for key, value in values.items():  # the schema types ports as integers, the rest as strings
        argv += ["--set" if isinstance(value, int) else "--set-string", f"{key}={value}"]
    # The local remotes' key Secrets (tokenfleet.devstack.remotes), mounted into the gateway.
    return [*argv, "--set", f"gateway.remoteKeySecrets={{{','.join(remotes.SECRETS)}}}"]
