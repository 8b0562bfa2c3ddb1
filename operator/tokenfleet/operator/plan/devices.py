"""Which device a ModelDeployment runs on, with which image, and whether it fits its pools (pure).

A ModelDeployment runs on its pools' device, GPU or CPU (InferencePool ``accelerator.kind``).
When ``engine.image`` is unset it is that device's worker image
(``tokenfleet.api.deployment.DEFAULT_IMAGES``). The loop fits each spec here right after
parsing it, so that everything after — the revision name, the rendered pods, the status — sees
the image that runs. A spec on GPU pools fits to exactly what it was before CPU pools existed
(the GPU image was the default), so no GPU revision name changes.

A spec that cannot run as written is a misfit, checked in this order::

    ImageNotAllowed       engine.image is outside the operator's image policy: an image without
                          TokenFleet's verify-first entrypoint would serve an unverified artifact
    MixedPoolDevices      pools of both kinds: one revision cannot carry both images and flags
    ImageDeviceMismatch   engine.image is named for the other device
    TensorParallelOnCpu · MemoryRequestTooSmall · ResourcesMissing
                          a CPU pool's replicas cannot be sized (plan.cpu_workers)

Its pools hold its workers as they are (nothing new rendered, nothing running removed) and the
ModelDeployment's ``Compatible`` condition says why, with the fix.

An image's device is judged by its name alone (:func:`image_device`): the operator cannot look
inside an image. A name that says neither is left to the worker, whose entrypoint compares the
image's own ``TOKENFLEET_DEVICE`` with the pool's and refuses to start (``DeviceMismatch`` in
the ``Verified`` condition): the name check only says it sooner, before a node is taken.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence

from tokenfleet.api.deployment import DEFAULT_IMAGES, ModelDeploymentSpec
from tokenfleet.api.pool import Device, InferencePoolSpec
from tokenfleet.operator.plan import cpu_workers, reporting

#: Reasons of the misfits this module and plan.cpu_workers decide.
REASONS = frozenset(
    {
        "ImageNotAllowed",
        "MixedPoolDevices",
        "ImageDeviceMismatch",
        "TensorParallelOnCpu",
        "MemoryRequestTooSmall",
        "ResourcesMissing",
    }
)
#: Words in an image's repository or tag that say which device it is built for.
_WORDS: dict[str, Device] = {"cpu": "CPU", "gpu": "GPU", "cuda": "GPU", "rocm": "GPU"}
#: TokenFleet's own worker repository tags its images by engine: vllm-v<version> (GPU),
#: vllm-cpu-v<version> (CPU), sim-<version> (the simulator, which serves on either).
_WORKER_REPOSITORY = "tokenfleet/worker"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Fit:
    """A spec fitted to its pools: its image filled in, its device, and whether it can run."""

    spec: ModelDeploymentSpec
    device: Device
    misfit: cpu_workers.Misfit | None = None
    summary: str = ""  # what it runs on, when it fits (the Compatible condition's message)


def image_device(image: str) -> Device | None:
    """The device ``image`` is built for, by its name: a ``cpu`` word in its repository or tag,
    or a ``gpu``, ``cuda`` or ``rocm`` word; TokenFleet's worker tags ``vllm-v…`` (GPU) and
    ``vllm-cpu-…`` (CPU). None when the name says neither (the simulator's, a custom image)."""
    for device, default in DEFAULT_IMAGES.items():
        if image == default:
            return device
    reference = image.split("@", 1)[0]
    parts = reference.split("/")
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        parts = parts[1:]  # a registry host says nothing of the device
    path = "/".join(parts)
    repository, _, tag = path.rpartition(":") if ":" in path else (path, "", "")
    words = re.findall(r"[a-z]+", path.lower())  # "cuda12" says cuda, "vllm-cpu" cpu
    said = {_WORDS[w] for w in words if w in _WORDS}
    if len(said) == 1:
        return said.pop()
    if repository.endswith(_WORKER_REPOSITORY) and tag.startswith("vllm-v"):
        return "GPU"
    return None


def repository(image: str) -> str:
    """An image reference without its digest or tag: ``ghcr.io/a/b:t@sha256:…`` is
    ``ghcr.io/a/b``."""
    reference = image.split("@", 1)[0]
    head, _, last = reference.rpartition("/")
    return f"{head}/{last.split(':', 1)[0]}" if head else last.split(":", 1)[0]


def image_allowed(image: str, allowed: Sequence[str]) -> bool:
    """Whether ``image``'s repository is one of ``allowed``, or below one ending in ``/``."""
    repo = repository(image)
    return any(repo == a or (a.endswith("/") and repo.startswith(a)) for a in allowed)


def fit(
    spec: ModelDeploymentSpec,
    *,
    pools: Mapping[str, InferencePoolSpec],
    allowed_images: Sequence[str] | None = None,
) -> Fit:
    """``spec`` fitted to ``pools``: the specs of its pools that exist, by name;
    ``allowed_images``: the image policy (None: any image, for callers that check elsewhere)."""
    devices = {name: pools[name].accelerator.kind for name in spec.pools if name in pools}
    device: Device = next(iter(devices.values()), "GPU")
    image = spec.engine.image or DEFAULT_IMAGES[device]
    fitted = spec.model_copy(update={"engine": spec.engine.model_copy(update={"image": image})})
    misfit = (
        _not_allowed(image, allowed_images)
        or _mixed(devices)
        or _image_misfit(image, device, devices, spec.engine.image is None)
    )
    if misfit is not None:
        return Fit(spec=fitted, device=device, misfit=misfit)
    sized: list[str] = []
    for name in (n for n, d in devices.items() if d == "CPU"):
        worker = cpu_workers.size(pools[name], fitted.engine, pool_name=name)
        if isinstance(worker, cpu_workers.Misfit):
            return Fit(spec=fitted, device=device, misfit=worker)
        sized.append(f"pool {name}: {worker.describe()}")
    where = f" ({_pools(devices)})" if devices else ""
    summary = "; ".join([f"runs on {device} nodes{where} with image {image}", *sized])
    return Fit(spec=fitted, device=device, summary=summary)


def _not_allowed(image: str, allowed: Sequence[str] | None) -> cpu_workers.Misfit | None:
    if allowed is None or image_allowed(image, allowed):
        return None
    return cpu_workers.Misfit(
        reason="ImageNotAllowed",
        message=f"engine.image {image} is not among the images this cluster allows "
        f"({', '.join(allowed)}): only images with TokenFleet's verify-first entrypoint may "
        "serve, as any other would start its engine without verifying the artifact; remove "
        "engine.image, or ask the platform team to allow the repository",
    )


def _mixed(devices: Mapping[str, Device]) -> cpu_workers.Misfit | None:
    if len(set(devices.values())) < 2:
        return None
    listed = reporting.names([f"{name} ({kind})" for name, kind in devices.items()])
    return cpu_workers.Misfit(
        reason="MixedPoolDevices",
        message=f"pools {listed} run on different devices, and one revision cannot carry "
        "both a GPU and a CPU worker: split this ModelDeployment in two, one per device, or "
        "list pools of one accelerator.kind",
    )


def _image_misfit(
    image: str, device: Device, devices: Mapping[str, Device], defaulted: bool
) -> cpu_workers.Misfit | None:
    named = image_device(image)
    if named is None or named == device or defaulted:
        return None
    return cpu_workers.Misfit(
        reason="ImageDeviceMismatch",
        message=f"engine.image {image} is built for {named} nodes but {_pools(devices)} "
        f"{'runs' if len(devices) == 1 else 'run'} on {device} nodes: remove engine.image to run "
        f"the {device} default ({DEFAULT_IMAGES[device]}), or set an image built for {device}",
    )


def _pools(devices: Mapping[str, Device]) -> str:
    """'pool a', 'pools a and b'."""
    return f"pool{'s' if len(devices) > 1 else ''} {reporting.names(list(devices))}"
