"""tokenfleet.kubeapi's connection settings from kubeconfigs (no server contacted): TLS is
verified unless the kubeconfig says insecure-skip-tls-verify, and the credential becomes the
Authorization header (a static token, a token file, or nothing for a client certificate)."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from tokenfleet.kubeapi import KubeApi


def kubeconfig(path: Path, cluster: dict[str, Any], user: dict[str, Any]) -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443", **cluster}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def settings(path: Path) -> tuple[ssl.VerifyMode, bool, dict[str, str]]:
    async def load() -> tuple[ssl.VerifyMode, bool, dict[str, str]]:
        async with aiohttp.ClientSession() as session:
            api = KubeApi.from_kubeconfig(path, session)
            return api._ssl.verify_mode, api._ssl.check_hostname, api._headers()

    return asyncio.run(load())


@pytest.mark.parametrize(
    ("cluster", "user", "verify", "header"),
    [
        ({}, {"token": "t1"}, ssl.CERT_REQUIRED, {"Authorization": "Bearer t1"}),
        (
            {"insecure-skip-tls-verify": True},
            {"token": "t2"},
            ssl.CERT_NONE,
            {"Authorization": "Bearer t2"},
        ),
        ({}, {"tokenFile": "TOKEN_FILE"}, ssl.CERT_REQUIRED, {"Authorization": "Bearer from-file"}),
        ({}, {}, ssl.CERT_REQUIRED, {}),
    ],
    ids=["token", "insecure-by-kubeconfig", "token-file", "anonymous"],
)
def test_kubeconfig_settings(
    tmp_path: Path,
    cluster: dict[str, Any],
    user: dict[str, Any],
    verify: ssl.VerifyMode,
    header: dict[str, str],
) -> None:
    (tmp_path / "token").write_text("from-file")
    user = {k: str(tmp_path / "token") if v == "TOKEN_FILE" else v for k, v in user.items()}
    mode, hostname, headers = settings(kubeconfig(tmp_path / "kc", cluster, user))
    assert mode == verify and hostname == (verify == ssl.CERT_REQUIRED)
    assert headers == header
