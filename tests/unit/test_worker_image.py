"""The worker image's Dockerfile cannot be built here; check what can be checked statically:
a pinned base tag that matches the GPU pools' default engine image, copied paths that exist,
the same model-signing version as the project, and an entrypoint module that exists."""

from __future__ import annotations

import re
from pathlib import Path

from tokenfleet.api.deployment import GPU_IMAGE

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = (REPO / "worker-image" / "Dockerfile").read_text()


def test_base_image_is_pinned_and_matches_the_default_engine_image() -> None:
    version = re.search(r"^ARG VLLM_VERSION=(v\d+\.\d+\.\d+)$", DOCKERFILE, re.M)
    assert version, "pin vllm/vllm-openai to a release tag, never latest"
    assert "FROM vllm/vllm-openai:${VLLM_VERSION}" in DOCKERFILE
    assert GPU_IMAGE.endswith(f"vllm-{version.group(1)}")


def test_copied_packages_exist() -> None:
    for source in re.findall(r"^COPY (\S+) ", DOCKERFILE, re.M):
        assert (REPO / source).is_dir(), source


def test_model_signing_version_satisfies_the_project_range() -> None:
    pinned = re.search(r'"model-signing==(\d+)\.(\d+)\.\d+"', DOCKERFILE)
    assert pinned
    pyproject = (REPO / "pyproject.toml").read_text()
    assert '"model-signing>=1.1,<2"' in pyproject
    assert (int(pinned.group(1)), int(pinned.group(2))) >= (1, 1) and pinned.group(1) == "1"


def test_entrypoint_module_exists() -> None:
    assert 'ENTRYPOINT ["python3", "-m", "tokenfleet.worker"]' in DOCKERFILE
    assert (REPO / "worker-image" / "tokenfleet" / "worker" / "__main__.py").is_file()
