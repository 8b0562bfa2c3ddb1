"""The worker refuses to serve on the wrong device: the image's TOKENFLEET_DEVICE (absent: gpu)
against the pool's TOKENFLEET_POOL_DEVICE (absent: gpu), before anything is fetched.

Matrix: image device × pool device × engine (vLLM, the simulator, which serves on either) with a
real signed model, exec a recorder; a refusal is a DeviceMismatch verdict in the termination
message (the operator's status path reads it like a refused artifact) and exit code 4, decided
before verification (an unreachable artifact still reads DeviceMismatch); unknown device names
are configuration errors; the operator's CPU rendering and the CPU image's environment agree.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from support.objects import BASE, merged
from tokenfleet.api.deployment import ModelDeploymentSpec
from tokenfleet.api.pool import InferencePoolSpec
from tokenfleet.operator.plan import desired, devices
from tokenfleet.signing import keys, verdict, verify
from tokenfleet.signing.verdict import Reason
from tokenfleet.worker import engines, entrypoint

PLACEHOLDER = "/models/artifact"
ARGS = [PLACEHOLDER, "--served-model-name", "tiny", "--port", "8000"]
ABSENT = None


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str], dict[str, str]]] = []

    def __call__(self, program: str, argv: list[str], env: dict[str, str]) -> None:
        self.calls.append((program, argv, env))


@pytest.fixture
def world(tmp_path: Path) -> dict[str, str]:
    """A signed model and the environment the operator would set for it."""
    private, public = keys.generate(tmp_path / "keys")
    model = tmp_path / "tiny"
    model.mkdir()
    (model / "config.json").write_text('{"architectures": ["Tiny"]}')
    digest = verify.sign(model, private_key=private, signature=model / "model.sig")
    return {
        "TOKENFLEET_ARTIFACT_URI": model.as_uri(),
        "TOKENFLEET_ARTIFACT_DIGEST": digest,
        "TOKENFLEET_TRUST_PUBLIC_KEY": str(public),
        "TOKENFLEET_MODEL_DIR": PLACEHOLDER,
        "TOKENFLEET_TERMINATION_LOG": str(tmp_path / "termination-log"),
    }


def environment(
    world: dict[str, str], *, image: str | None, pool: str | None, engine: str | None = None
) -> dict[str, str]:
    given = {
        "TOKENFLEET_DEVICE": image,
        "TOKENFLEET_POOL_DEVICE": pool,
        "TOKENFLEET_ENGINE": engine,
    }
    return {**world, **{k: v for k, v in given.items() if v is not None}}


@pytest.mark.parametrize(
    ("image", "pool", "engine"),
    [
        pytest.param(ABSENT, ABSENT, None, id="gpu-image-gpu-pool-as-before"),
        pytest.param("gpu", ABSENT, None, id="gpu-image-unmarked-pool"),
        pytest.param("cpu", "cpu", None, id="cpu-image-cpu-pool"),
        pytest.param(ABSENT, "cpu", engines.SIMULATOR, id="simulator-on-cpu-pool"),
        pytest.param("cpu", ABSENT, engines.SIMULATOR, id="simulator-marked-cpu-on-gpu-pool"),
    ],
)
def test_an_image_for_the_pools_device_verifies_and_serves(
    world: dict[str, str], image: str | None, pool: str | None, engine: str | None
) -> None:
    exec_ = Recorder()
    env = environment(world, image=image, pool=pool, engine=engine)
    assert entrypoint.run(ARGS, env=env, exec_=exec_) == 0
    assert len(exec_.calls) == 1
    assert not Path(world["TOKENFLEET_TERMINATION_LOG"]).exists()


@pytest.mark.parametrize(
    ("image", "pool", "says"),
    [
        pytest.param("cpu", ABSENT, "built for cpu", id="cpu-image-on-gpu-pool"),
        pytest.param("cpu", "gpu", "built for cpu", id="cpu-image-on-marked-gpu-pool"),
        pytest.param(ABSENT, "cpu", "built for gpu", id="gpu-image-on-cpu-pool"),
        pytest.param("gpu", "cpu", "runs on cpu nodes", id="marked-gpu-image-on-cpu-pool"),
    ],
)
def test_an_image_for_the_other_device_never_starts_the_engine(
    world: dict[str, str], tmp_path: Path, image: str | None, pool: str | None, says: str
) -> None:
    exec_ = Recorder()
    env = environment(world, image=image, pool=pool)
    # unreachable: had it been fetched, the verdict would read ArtifactUnreachable
    env["TOKENFLEET_ARTIFACT_URI"] = (tmp_path / "nowhere").as_uri()
    assert entrypoint.run(ARGS, env=env, exec_=exec_) == entrypoint.EXIT_WRONG_DEVICE
    assert exec_.calls == []
    written = verdict.parse(Path(world["TOKENFLEET_TERMINATION_LOG"]).read_text())
    assert written is not None and written.reason is Reason.DEVICE_MISMATCH
    assert not written.verified
    assert says in written.message and "remove engine.image" in written.message


@pytest.mark.parametrize(
    ("name", "value"),
    [
        pytest.param("TOKENFLEET_DEVICE", "tpu", id="image-device"),
        pytest.param("TOKENFLEET_POOL_DEVICE", "CPU", id="pool-device-upper-case"),
    ],
)
def test_an_unknown_device_is_a_configuration_error(
    world: dict[str, str], name: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    exec_ = Recorder()
    assert entrypoint.run(ARGS, env={**world, name: value}, exec_=exec_) == entrypoint.EXIT_CONFIG
    assert exec_.calls == [] and name in capsys.readouterr().err


def _rendered_env(pool: dict[str, Any]) -> dict[str, str]:
    """The worker container's environment as the operator renders it for ``pool``."""
    pool_spec = InferencePoolSpec.model_validate(merged(BASE["InferencePool"], pool))
    fitted = devices.fit(
        ModelDeploymentSpec.model_validate(BASE["ModelDeployment"]), pools={"demo-pool": pool_spec}
    )
    manifest = desired.worker_deployment(
        namespace="demo",
        pool_name="demo-pool",
        pool=pool_spec,
        model=fitted.spec,
        owner=desired.Owner(kind="InferencePool", name="demo-pool", uid="u"),
        zone="zone-a",
        replicas=1,
    )
    container = manifest["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in container["env"]}


CPU_POOL = {"accelerator": {"kind": "CPU", "product": "", "cpu": "4", "memory": "16Gi"}}


@pytest.mark.parametrize(
    ("pool", "image_env", "device"),
    [
        pytest.param(CPU_POOL, {"TOKENFLEET_DEVICE": "cpu"}, "cpu", id="cpu-pool-cpu-image"),
        pytest.param(CPU_POOL, {}, "cpu", id="cpu-pool-gpu-image-refused"),
        pytest.param({}, {}, "gpu", id="gpu-pool-gpu-image"),
        pytest.param({}, {"TOKENFLEET_DEVICE": "cpu"}, "gpu", id="gpu-pool-cpu-image-refused"),
    ],
)
def test_the_operators_rendering_and_the_images_environment_agree(
    pool: dict[str, Any], image_env: dict[str, str], device: str
) -> None:
    env = {**_rendered_env(pool), **image_env}  # the image's ENV beside the pod's
    config = entrypoint.Config.from_env(env)
    assert config.pool_device == device
    mismatch = engines.device_mismatch(config.engine, image=config.device, pool=config.pool_device)
    assert bool(mismatch) == (config.device != device)
