"""What the node agent writes about a pod: readiness patches and Warning Events.

Matrix: ready × with/without message × pods with 0/2 containers; the Event names the pod (kind,
namespace, uid) and its node, so `kubectl describe pod` and `kubectl get events` show it.
"""

from __future__ import annotations

from typing import Any

import pytest

from tokenfleet.devstack import podstatus

NOW = "2026-12-01T12:00:00Z"


def pod(containers: int = 2) -> dict[str, Any]:
    return {
        "metadata": {"name": "w-1", "namespace": "ns", "uid": "uid-1"},
        "spec": {"nodeName": "gpu-zone-b-0"},
        "status": {
            "containerStatuses": [{"name": f"c{i}", "ready": False} for i in range(containers)]
        },
    }


@pytest.mark.parametrize(
    ("ready", "message", "containers", "status", "has_message"),
    [
        (True, "", 2, "True", False),
        (False, "", 2, "False", False),
        (False, "cannot listen on 127.1.4.1:8000: in use", 2, "False", True),
        (False, "why", 0, "False", True),
    ],
)
def test_readiness_patch(
    ready: bool, message: str, containers: int, status: str, has_message: bool
) -> None:
    patch = podstatus.readiness_patch(
        pod(containers), ready=ready, reason="R", now=NOW, message=message
    )
    assert [c["type"] for c in patch["conditions"]] == ["ContainersReady", "Ready"]
    for condition in patch["conditions"]:
        assert condition["status"] == status and condition["reason"] == "R"
        assert condition["lastTransitionTime"] == NOW
        assert ("message" in condition) is has_message
        assert condition.get("message", "") == message
    assert [c["ready"] for c in patch["containerStatuses"]] == [ready] * containers


def test_warning_event_names_the_pod_and_its_node() -> None:
    event = podstatus.warning_event(
        pod(), reason=podstatus.CANNOT_LISTEN, message="m", now=NOW, source="agent"
    )
    assert event["type"] == "Warning" and event["reason"] == "CannotListen"
    assert event["metadata"] == {"generateName": "w-1.", "namespace": "ns"}
    assert event["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "w-1",
        "namespace": "ns",
        "uid": "uid-1",
    }
    assert event["source"] == {"component": "agent", "host": "gpu-zone-b-0"}
    assert event["firstTimestamp"] == event["lastTimestamp"] == NOW and event["count"] == 1


@pytest.mark.parametrize(
    ("address", "error", "expected"),
    [
        ("127.1.4.1:8000", "address already in use", "cannot listen on 127.1.4.1:8000: address"),
        ("127.2.1.9:9000", "x", "cannot listen on 127.2.1.9:9000: x; another pod or process"),
    ],
)
def test_cannot_listen_message(address: str, error: str, expected: str) -> None:
    assert podstatus.cannot_listen_message(address, error).startswith(expected)


# --- the verify step's record: what a kubelet keeps of the init container `verify` ----------

PASSED = '{"reason":"Verified","digest":"sha256:aa","signer":"key:sha256:bb"}'


def worker(init: list[str]) -> dict[str, Any]:
    body = pod()
    body["spec"]["initContainers"] = [{"name": n, "image": "w:1"} for n in init]
    return body


@pytest.mark.parametrize(
    ("verified", "exit_code", "initialized"),
    [
        pytest.param(True, 0, "True", id="pass"),
        pytest.param(False, 3, "False", id="refusal"),
    ],
)
def test_the_verdict_is_the_verify_init_containers_termination_message(
    verified: bool, exit_code: int, initialized: str
) -> None:
    from tokenfleet.operator.plan import observed

    patch = podstatus.verify_step_patch(
        worker(["verify"]), message=PASSED, verified=verified, now=NOW
    )
    assert patch is not None
    [status] = patch["initContainerStatuses"]
    assert status["name"] == "verify" and status["image"] == "w:1"
    assert status["state"]["terminated"]["exitCode"] == exit_code
    assert patch["conditions"] == [
        {"type": "Initialized", "status": initialized, "lastTransitionTime": NOW}
        | ({} if verified else {"reason": "ContainersNotInitialized"})
    ]
    # what the operator reads back from the pod once the patch is applied
    applied = {**worker(["verify"]), "status": {**pod()["status"], **patch}}
    assert observed.worker_pod(applied).verdict == PASSED


def test_a_pod_without_the_verify_step_gets_no_record() -> None:
    """A hand-made worker pod has no init container to hold a verdict: nothing is invented."""
    assert podstatus.verify_step_patch(worker([]), message=PASSED, verified=True, now=NOW) is None


def test_other_init_containers_keep_their_status() -> None:
    body = worker(["setup", "verify"])
    body["status"]["initContainerStatuses"] = [{"name": "setup", "state": {"terminated": {}}}]
    patch = podstatus.verify_step_patch(body, message=PASSED, verified=True, now=NOW)
    assert patch is not None
    setup, verify = patch["initContainerStatuses"]
    assert setup == {"name": "setup", "state": {"terminated": {}}}
    assert verify["name"] == "verify"
