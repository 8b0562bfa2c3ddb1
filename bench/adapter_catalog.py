"""What thousands of ModelAdapters cost the gateway's catalog: one rebuild (every watched object
parsed into the immutable value requests read), by adapter count.

The gateway rebuilds after watch events, waiting at least twice as long as the last rebuild
took (discovery.rebuild_delay), so this figure bounds how stale a change can be and keeps
rebuilding under a third of a core however often adapters' status changes.

    .venv/bin/python bench/adapter_catalog.py
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from tokenfleet.gateway import catalog, discovery

DIGEST = "sha256:" + "a" * 64


def base(ns: str) -> dict[str, Any]:
    artifact = {"uri": "file:///m", "digest": DIGEST, "trust": {"publicKey": {"name": "k"}}}
    return {
        "metadata": {"namespace": ns, "name": "base", "uid": "base"},
        "spec": {
            "model": {"name": "base"},
            "pools": ["p"],
            "artifact": artifact,
            "engine": {"lora": {"maxLoras": 16}},
            "adapters": {},
        },
    }


def pool(ns: str) -> dict[str, Any]:
    spec = {"accelerator": {"product": "H100"}, "zones": {"names": ["zone-a"]}}
    return {"metadata": {"namespace": ns, "name": "p", "uid": "p"}, "spec": spec}


def adapter(ns: str, i: int) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": ns,
            "name": f"a{i}",
            "uid": f"a{i}",
            "generation": 1,
            "resourceVersion": str(1000 + i),
        },
        "spec": {
            "base": "base",
            "servedName": f"a{i}",
            "artifact": {"uri": f"file:///adapters/a{i}", "digest": DIGEST},
            "tenants": [f"t{i % 50}"],
        },
        "status": {"observedGeneration": 1, "verified": True, "digest": DIGEST},
    }


def rebuild_ms(count: int, *, changed: int, repeats: int = 7) -> float:
    """The median rebuild with ``count`` adapters of which ``changed`` are new since the last
    (a status write bumps an object's resourceVersion: its entry is derived again)."""
    adapters = [adapter("ns", i) for i in range(count)]
    took = []
    for round_ in range(repeats + 1):
        for i in range(min(changed, count)):
            adapters[i]["metadata"]["resourceVersion"] = f"{round_}-{i}"
        start = time.perf_counter()
        catalog.from_objects(
            pools=[pool("ns")], models=[base("ns")], tenants=[], secrets=[], pods=[],
            adapters=adapters,
        )  # fmt: skip
        if round_:  # the first rebuild derives every entry
            took.append(time.perf_counter() - start)
    return statistics.median(took) * 1e3


def main() -> None:
    print(f"{'adapters':>9} {'changed':>8} {'rebuild':>10} {'next rebuild after':>19}")
    for count in (100, 1000, 2000, 5000):
        for changed in (count, 50, 1):
            ms = rebuild_ms(count, changed=changed)
            delay = discovery.rebuild_delay(ms / 1e3) * 1e3
            print(f"{count:9,} {changed:8,} {ms:8.1f} ms {delay:16.1f} ms")


if __name__ == "__main__":
    main()
