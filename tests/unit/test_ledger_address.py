"""Finding the usage ledger from the gateway's Deployment and Secrets (pure): the chart's three
ways of giving the gateway Redis (in-release with a generated password, an external URL, an
external URL from a Secret) and a `--redis` argument; the kubelet's `$(VAR)` expansion; what is
reported when a Secret cannot be read; which host names are cluster Services to port-forward
to; kubectl port-forward's command line and output; and that no password reaches a message."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from tokenfleet.devstack import ledger_address as la

PASSWORD = "s3cretPassw0rd"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def secret(name: str, **data: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "data": {k: b64(v) for k, v in data.items()}}


def deployment(
    *,
    env: list[dict[str, Any]] | None = None,
    args: list[str] | None = None,
    name: str = "tokenfleet-gateway",
    sidecar_first: bool = False,
) -> dict[str, Any]:
    """The chart's gateway Deployment (templates/gateway-deployment.yaml), in-release Redis on
    the values-local host by default; ``env``/``args`` replace the container's."""
    container = {
        "name": "gateway",
        "args": args if args is not None else ["gateway", "--host=127.0.0.1", "--port=8080"],
        "env": env
        if env is not None
        else [
            {
                "name": "TOKENFLEET_REDIS_PASSWORD",
                "valueFrom": {"secretKeyRef": {"name": "tokenfleet-redis", "key": "password"}},
            },
            {
                "name": "TOKENFLEET_REDIS_URL",
                "value": "redis://:$(TOKENFLEET_REDIS_PASSWORD)@127.0.0.1:16379/0",
            },
            {"name": "TOKENFLEET_QUOTA_FAILURE", "value": "open"},
            {
                "name": "TOKENFLEET_ZONE",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['zone']"}},
            },
        ],
    }
    sidecar = {"name": "proxy", "env": [{"name": "TOKENFLEET_REDIS_URL", "value": "redis://x"}]}
    containers = [sidecar, container] if sidecar_first else [container]
    return {
        "metadata": {"name": name, "namespace": "tokenfleet-system"},
        "spec": {"template": {"spec": {"containers": containers}}},
    }


CHART_SECRETS = {"tokenfleet-redis": secret("tokenfleet-redis", password=PASSWORD)}


@pytest.mark.parametrize(
    ("text", "env", "expected"),
    [
        pytest.param("$(A)", {"A": "v"}, "v", id="defined"),
        pytest.param("x$(A)y$(A)", {"A": "v"}, "xvyv", id="twice"),
        pytest.param("$(B)", {"A": "v"}, "$(B)", id="undefined-left-as-written"),
        pytest.param("$$(A)", {"A": "v"}, "$(A)", id="escaped"),
        pytest.param("a$$b", {}, "a$b", id="double-dollar"),
        pytest.param("$(A", {"A": "v"}, "$(A", id="unclosed"),
        pytest.param("$A", {"A": "v"}, "$A", id="no-parentheses"),
        pytest.param("$()", {}, "$()", id="empty-name"),
        pytest.param("end$", {}, "end$", id="trailing-dollar"),
    ],
)
def test_expansion_follows_the_kubelet(text: str, env: dict[str, str], expected: str) -> None:
    assert la.expand(text, env) == expected


@pytest.mark.parametrize(
    ("found", "secrets", "url", "secret_refs"),
    [
        pytest.param(
            deployment(),
            CHART_SECRETS,
            f"redis://:{PASSWORD}@127.0.0.1:16379/0",
            ("tokenfleet-redis, key password",),
            id="chart-in-release-redis",
        ),
        pytest.param(
            deployment(
                env=[
                    {"name": "P", "valueFrom": {"secretKeyRef": {"name": "r", "key": "password"}}},
                    {
                        "name": "TOKENFLEET_REDIS_URL",
                        "value": "redis://:$(P)@tf-redis.tf.svc:6379/0",
                    },
                ]
            ),
            {"r": secret("r", password=PASSWORD)},
            f"redis://:{PASSWORD}@tf-redis.tf.svc:6379/0",
            ("r, key password",),
            id="chart-default-host-a-service",
        ),
        pytest.param(
            deployment(
                env=[{"name": "TOKENFLEET_REDIS_URL", "value": "rediss://redis.corp:6380/2"}]
            ),
            {},
            "rediss://redis.corp:6380/2",
            (),
            id="external-url",
        ),
        pytest.param(
            deployment(
                env=[
                    {
                        "name": "TOKENFLEET_REDIS_URL",
                        "valueFrom": {"secretKeyRef": {"name": "ext", "key": "url"}},
                    }
                ]
            ),
            {"ext": secret("ext", url=f"redis://:{PASSWORD}@redis.corp:6379/0")},
            f"redis://:{PASSWORD}@redis.corp:6379/0",
            ("ext, key url",),
            id="external-url-from-a-secret",
        ),
        pytest.param(
            deployment(args=["gateway", "--redis", "redis://10.0.0.9:6379/0"]),
            CHART_SECRETS,
            "redis://10.0.0.9:6379/0",
            ("tokenfleet-redis, key password",),
            id="redis-argument-beats-the-variable",
        ),
        pytest.param(
            deployment(args=["gateway", "--redis=redis://:$(TOKENFLEET_REDIS_PASSWORD)@h:1/0"]),
            CHART_SECRETS,
            f"redis://:{PASSWORD}@h:1/0",
            ("tokenfleet-redis, key password",),
            id="redis-argument-expanded",
        ),
        pytest.param(
            deployment(sidecar_first=True),
            CHART_SECRETS,
            f"redis://:{PASSWORD}@127.0.0.1:16379/0",
            ("tokenfleet-redis, key password",),
            id="the-gateway-container-not-a-sidecar",
        ),
    ],
)
def test_the_url_is_what_the_gateway_pods_get(
    found: dict[str, Any], secrets: dict[str, Any], url: str, secret_refs: tuple[str, ...]
) -> None:
    got = la.address(found, secrets=secrets)
    assert isinstance(got, la.Address)
    assert (got.url, got.secrets, got.namespace) == (url, secret_refs, "tokenfleet-system")
    assert got.source == f"Deployment tokenfleet-system/{found['metadata']['name']}"
    assert PASSWORD not in repr(got) and PASSWORD not in got.shown


@pytest.mark.parametrize(
    ("found", "secrets", "says"),
    [
        pytest.param(
            deployment(), {}, "needs $(TOKENFLEET_REDIS_PASSWORD)", id="password-secret-unread"
        ),
        pytest.param(
            deployment(
                env=[
                    {
                        "name": "TOKENFLEET_REDIS_URL",
                        "valueFrom": {"secretKeyRef": {"name": "ext", "key": "url"}},
                    }
                ]
            ),
            {},
            "no Redis URL (Secret ext could not be read)",
            id="url-secret-unread",
        ),
        pytest.param(
            deployment(env=[{"name": "TOKENFLEET_QUOTA_FAILURE", "value": "open"}]),
            {},
            "gives its gateway no Redis URL",
            id="no-redis-at-all",
        ),
        pytest.param(
            deployment(
                env=[{"name": "TOKENFLEET_REDIS_URL", "value": "redis://:a$$$$b$(PW)@h:1/0"}]
            ),
            {},
            "needs $(PW)",
            id="a-reference-after-an-escaped-dollar",
        ),
        pytest.param(
            deployment(),
            {"tokenfleet-redis": {"data": {"password": "%%% not base64"}}},
            "needs $(TOKENFLEET_REDIS_PASSWORD)",
            id="undecodable-secret",
        ),
    ],
)
def test_an_unresolvable_url_says_why(
    found: dict[str, Any], secrets: dict[str, Any], says: str
) -> None:
    got = la.address(found, secrets=secrets)
    assert isinstance(got, la.Unknown)
    assert says in got.reason and "Deployment tokenfleet-system/tokenfleet-gateway" in got.reason


def test_the_secrets_to_read_are_those_the_gateway_env_names() -> None:
    assert la.secret_names(deployment()) == ["tokenfleet-redis"]
    assert la.secret_names(deployment(env=[])) == []


def test_the_gateway_is_chosen_by_name() -> None:
    later, first = deployment(name="tokenfleet-gateway"), deployment(name="a-tokenfleet-gateway")
    assert la.gateway([later, first]) is first
    assert la.gateway([]) is None


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        pytest.param(f"redis://:{PASSWORD}@h:6379/0", "redis://:***@h:6379/0", id="password"),
        pytest.param(f"redis://u:{PASSWORD}@h:6379/0", "redis://u:***@h:6379/0", id="user"),
        pytest.param(f"rediss://:{PASSWORD}@h/1", "rediss://:***@h/1", id="tls-no-port"),
        pytest.param("redis://h:6379/0", "redis://h:6379/0", id="no-password"),
    ],
)
def test_redacted_urls_keep_everything_but_the_password(url: str, shown: str) -> None:
    assert la.redact(url) == shown


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        pytest.param("tokenfleet-redis", ("tokenfleet-redis", "gw-ns"), id="short-name"),
        pytest.param("r.tf", ("r", "tf"), id="name-namespace"),
        pytest.param("r.tf.svc", ("r", "tf"), id="chart-default"),
        pytest.param("r.tf.svc.cluster.local", ("r", "tf"), id="fully-qualified"),
        pytest.param("r.tf.svc.cluster.local.", ("r", "tf"), id="trailing-dot"),
        pytest.param("127.0.0.1", None, id="ipv4"),
        pytest.param("::1", None, id="ipv6"),
        pytest.param("localhost", None, id="localhost"),
        pytest.param("redis.corp.example", None, id="external-name"),
        pytest.param("", None, id="empty"),
    ],
)
def test_which_hosts_are_cluster_services(host: str, expected: tuple[str, str] | None) -> None:
    assert la.service_of(host, "gw-ns") == expected


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        pytest.param(
            f"redis://:{PASSWORD}@r.tf.svc:6379/0", f"redis://:{PASSWORD}@127.0.0.1:41234/0"
        ),
        pytest.param("redis://r.tf.svc:6379/3", "redis://127.0.0.1:41234/3"),
    ],
)
def test_a_forwarded_url_keeps_password_and_database(url: str, expected: str) -> None:
    assert la.forwarded(url, 41234) == expected


@pytest.mark.parametrize(
    ("line", "port"),
    [
        pytest.param("Forwarding from 127.0.0.1:41234 -> 6379\n", 41234, id="ipv4"),
        pytest.param("Forwarding from [::1]:41234 -> 6379", None, id="ipv6-not-asked-for"),
        pytest.param("Handling connection for 41234", None, id="other"),
    ],
)
def test_kubectl_port_forward_output(line: str, port: int | None) -> None:
    assert la.forwarding_port(line) == port


@pytest.mark.parametrize(
    ("kubeconfig", "context", "tail"),
    [
        pytest.param(None, None, [], id="plain"),
        pytest.param("/k", "c", ["--kubeconfig", "/k", "--context", "c"], id="kubeconfig-context"),
    ],
)
def test_port_forward_command_line(
    kubeconfig: str | None, context: str | None, tail: list[str]
) -> None:
    argv = la.port_forward_argv(
        kubectl="kubectl", service="r", namespace="tf", port=6379, kubeconfig=kubeconfig,
        context=context,
    )  # fmt: skip
    assert argv == [
        "kubectl", "port-forward", "--namespace", "tf", "svc/r", ":6379",
        "--address", "127.0.0.1", *tail,
    ]  # fmt: skip


def test_what_to_pass_names_the_secret_but_not_the_password() -> None:
    found = la.address(deployment(), secrets=CHART_SECRETS)
    assert isinstance(found, la.Address)
    hint = la.what_to_pass(found)
    assert PASSWORD not in hint
    assert "--redis redis://:PASSWORD@HOST:PORT/0" in hint
    assert "127.0.0.1:16379" in hint
    assert "Secret tokenfleet-system/tokenfleet-redis, key password" in hint
