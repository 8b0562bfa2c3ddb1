"""The built helm, run against a test cluster with its own cache, config and data folders."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

from support.cluster import BIN_DIR

Helm = Callable[..., subprocess.CompletedProcess[str]]


def helm_runner(env: dict[str, str], home: Path) -> Helm:
    """``run(*args, check=True)``: helm with ``env`` (the cluster's KUBECONFIG) and its state
    under ``home``; raises with helm's stderr when ``check`` and it fails."""
    env = {
        **env,
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }

    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(BIN_DIR / "helm"), *args], env=env, capture_output=True, text=True,
            timeout=180, check=False,
        )  # fmt: skip
        if check and done.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed: {done.stderr}")
        return done

    return run
