"""The worker pod's verify step: an init container whose verdict the operator reads (pure).

The worker image's entrypoint verifies the artifact before its engine starts. Run inside the
engine container, a pass left nothing the operator could read: the container keeps running, so
no termination message, and the log is not status. Run as the init container ``verify``
(``python -m tokenfleet.worker verify``), the step ends either way, and the kubelet keeps its
verdict — digest and signer on a pass, the reason on a refusal — in
``status.initContainerStatuses[verify].state.terminated.message``, a field only the kubelet (and
on the local platform, the node agent standing in for it) writes. The engine container starts
only after it exited 0, and serves only the directory its record names, for its own digest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: The init container's name: the operator reads its termination message (plan.observed).
CONTAINER = "verify"
#: The entrypoint's first argument that makes it the verify step (tokenfleet.worker).
STEP_ARG = "verify"
#: Where the verify step leaves the verified directory's path for the engine container, on
#: the pod's ``/models`` volume (an emptyDir only this pod's containers share).
RECORD_PATH = "/models/verified.json"
RECORD_ENV = {"name": "TOKENFLEET_VERIFIED_RECORD", "value": RECORD_PATH}


#: Resources the verify step shares with the engine container: CPU and memory (a namespace's
#: quota may demand them of every container); never an accelerator.
_SHARED_RESOURCES = ("cpu", "memory")


def container(
    *,
    image: str,
    env: Sequence[dict[str, Any]],
    mounts: Sequence[dict[str, Any]],
    security: dict[str, Any],
    engine_resources: Mapping[str, Mapping[str, str]],
) -> dict[str, Any]:
    """The init container: the engine's image (it carries the verifier), the artifact's and the
    device's environment, the models and trust mounts, the engine's CPU and memory (the pod's
    request stays the engine's: an init container's counts only while it runs alone); no GPU,
    no engine key."""
    resources = {
        kind: {k: v for k, v in amounts.items() if k in _SHARED_RESOURCES}
        for kind, amounts in engine_resources.items()
    }
    return {
        "name": CONTAINER,
        "image": image,
        "args": [STEP_ARG],
        "env": [*env, RECORD_ENV],
        "securityContext": security,
        # the verdict, pass or refusal, is the message; never the log's tail
        "terminationMessagePolicy": "File",
        "resources": {kind: amounts for kind, amounts in resources.items() if amounts},
        "volumeMounts": list(mounts),
    }
