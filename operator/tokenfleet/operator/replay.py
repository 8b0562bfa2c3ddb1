"""Replays a golden set against the stable and the canary revision (a shell; run as a task).

The operator asks each revision's engines directly (their pod addresses, as the gateway
routes to them) rather than through the gateway's ``X-TokenFleet-Revision`` pin: a pin would
need a tenant API key in the operator, would count the replay against that tenant's quota and
usage, and would measure the router besides the revision; the pin resolves to these same pods.
Requests go out at temperature 0 with a fixed seed, ``concurrency`` at a time, each bounded by
``timeoutSeconds``; a request that fails is an unanswered case (scored as failed).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import aiohttp
import pydantic
import yaml
from kubernetes.client.exceptions import ApiException

from tokenfleet.api.quality import GoldenCase, GoldenSet, Quality, parse_golden
from tokenfleet.operator.k8s import Kube
from tokenfleet.operator.plan import gate

log = logging.getLogger("tokenfleet.operator.replay")


async def golden_set(kube: Kube, namespace: str, spec: Quality) -> GoldenSet | str:
    """The golden set from its ConfigMap, or why it cannot be used."""
    ref = spec.golden_set
    try:
        data = await asyncio.to_thread(kube.config_map, namespace, ref.name)
    except ApiException as exc:
        return f"ConfigMap {ref.name}: {exc.status} {exc.reason}"
    if ref.key not in data:
        return f"ConfigMap {ref.name} has no key {ref.key}"
    try:
        return parse_golden(data[ref.key], loads=yaml.safe_load)
    except (yaml.YAMLError, pydantic.ValidationError, ValueError) as exc:
        return f"ConfigMap {ref.name}/{ref.key} is not a golden set: {str(exc)[:300]}"


async def _ask(
    session: aiohttp.ClientSession, url: str, body: dict[str, object], timeout: float
) -> str | None:
    try:
        async with session.post(
            url, json=body, timeout=aiohttp.ClientTimeout(total=timeout)
        ) as response:
            if response.status != 200:
                return None
            data = await response.json()
            return str(data["choices"][0]["text"])
    except (aiohttp.ClientError, TimeoutError, ValueError, KeyError, IndexError, TypeError):
        return None


async def answers(
    session: aiohttp.ClientSession,
    *,
    cases: Sequence[GoldenCase],
    addresses: Sequence[str],
    model: str,
    spec: Quality,
) -> dict[str, str | None]:
    """Each case's answer from one revision's engines (spread over them round-robin)."""
    limit = asyncio.Semaphore(spec.concurrency)

    async def one(i: int, case: GoldenCase) -> str | None:
        body: dict[str, object] = {
            "model": model,
            "prompt": case.prompt,
            "max_tokens": case.max_tokens or spec.max_tokens,
            "temperature": 0,
            "seed": spec.seed,
        }
        url = f"{addresses[i % len(addresses)]}/v1/completions"
        async with limit:
            return await _ask(session, url, body, spec.timeout_seconds)

    got = await asyncio.gather(*(one(i, c) for i, c in enumerate(cases)))
    return {c.name: text for c, text in zip(cases, got, strict=True)}


async def replay(
    kube: Kube,
    *,
    namespace: str,
    model: str,
    spec: Quality,
    stable: tuple[str, Sequence[str]],
    canary: tuple[str, Sequence[str]],
) -> gate.Replay:
    """Read the golden set, ask both revisions, return the answers (scored by the planner)."""
    found = await golden_set(kube, namespace, spec)
    if isinstance(found, str):
        log.warning("%s/%s: golden set unusable: %s", namespace, model, found)
        return gate.Replay(stable=stable[0], canary=canary[0], error=found)
    async with aiohttp.ClientSession() as session:
        results = await asyncio.gather(
            *(
                answers(session, cases=found.cases, addresses=addrs, model=model, spec=spec)
                for _, addrs in (stable, canary)
            )
        )
    return gate.Replay(
        stable=stable[0],
        canary=canary[0],
        golden=found,
        answers={stable[0]: results[0], canary[0]: results[1]},
    )
