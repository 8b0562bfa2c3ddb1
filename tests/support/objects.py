"""Valid TokenFleet objects with overrides, and the table of invalid ones.

Each invalid case is a valid object with one thing broken, so a rejection can only be for that
thing; the expected text is what the API server says (the pydantic models reject the same).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

DELETE = object()  # in an override: remove this key

Obj = dict[str, Any]


def merged(base: Obj, override: Obj) -> Obj:
    """``base`` deep-merged with ``override``; lists are replaced, DELETE removes a key."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        if value is DELETE:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


POOL_SPEC: Obj = {
    "accelerator": {"product": "NVIDIA-H100-80GB-HBM3"},
    "zones": {"names": ["zone-a", "zone-b", "zone-c"]},
    "replicas": {"min": 3, "max": 12},
}
MODEL_SPEC: Obj = {
    "model": {"name": "demo-model"},
    "pools": ["demo-pool"],
    "artifact": {
        "uri": "file:///models/demo",
        "digest": "sha256:" + "a" * 64,
        "trust": {"publicKey": {"name": "signing-key"}},
    },
}
TENANT_SPEC: Obj = {"apiKeySecretRef": {"name": "demo-keys"}, "allowedModels": ["demo-model"]}

ADAPTER_SPEC: Obj = {
    "base": "demo-model",
    "servedName": "demo-adapter",
    "artifact": {"uri": "file:///models/adapters/demo", "digest": "sha256:" + "b" * 64},
    "tenants": ["demo-tenant"],
}

ROUTE_SPEC: Obj = {
    "name": "chat-auto",
    "rules": [
        {
            "name": "short-without-tools",
            "match": {"maxPromptTokens": 499, "tools": False},
            "targets": [{"model": "demo-small"}],
        }
    ],
    "defaultTargets": [{"model": "demo-model"}],
}

BASE = {
    "InferencePool": POOL_SPEC,
    "ModelDeployment": MODEL_SPEC,
    "Tenant": TENANT_SPEC,
    "ModelAdapter": ADAPTER_SPEC,
    "ModelRoute": ROUTE_SPEC,
}


def manifest(kind: str, name: str, namespace: str, spec: Obj) -> Obj:
    return {
        "apiVersion": "tokenfleet.io/v1alpha1",
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def _case(case_id: str, kind: str, override: Obj, message: str) -> Any:
    return pytest.param(kind, merged(BASE[kind], override), message, id=case_id)


INVALID = [
    _case(
        "pool-min-above-max",
        "InferencePool",
        {"replicas": {"min": 13}},
        "replicas.min must be less than or equal to replicas.max",
    ),
    _case(
        "pool-warm-floor-above-max",
        "InferencePool",
        {"warm": {"perZone": 5}},
        "warm.perZone times the number of zones must not exceed replicas.max",
    ),
    _case(
        "pool-tolerate-losing-every-zone",
        "InferencePool",
        {"zones": {"tolerateLoss": 3}},
        "zones.tolerateLoss must be smaller than the number of zones",
    ),
    _case(
        "pool-duplicate-class-names",
        "InferencePool",
        {"admission": {"classes": [{"name": "a", "priority": 1}, {"name": "a", "priority": 2}]}},
        "class names must be unique",
    ),
    _case(
        "pool-reserved-share-over-100",
        "InferencePool",
        {
            "admission": {
                "classes": [
                    {"name": "a", "priority": 1, "reservedPercent": 60},
                    {"name": "b", "priority": 2, "reservedPercent": 60},
                ]
            }
        },
        "reservedPercent must add up to at most 100",
    ),
    _case(
        "pool-queue-age-class-unknown",
        "InferencePool",
        {"autoscaling": {"queueAgeClasses": ["chat"]}},
        "queueAgeClasses must name classes of admission.classes",
    ),
    _case(
        "pool-schedule-min-above-max",
        "InferencePool",
        {
            "autoscaling": {
                "schedules": [
                    {
                        "name": "launch",
                        "start": "08:00",
                        "end": "09:00",
                        "minReplicas": 5,
                        "maxReplicas": 4,
                    }
                ]
            }
        },
        "minReplicas must be less than or equal to maxReplicas",
    ),
    _case(
        "pool-schedule-bad-time",
        "InferencePool",
        {
            "autoscaling": {
                "schedules": [
                    {
                        "name": "launch",
                        "start": "25:00",
                        "end": "09:00",
                        "minReplicas": 1,
                        "maxReplicas": 4,
                    }
                ]
            }
        },
        "should match",
    ),
    _case(
        "pool-wrong-type", "InferencePool", {"replicas": {"min": "six"}}, "must be of type integer"
    ),
    _case(
        "pool-unknown-field",
        "InferencePool",
        {"replica": {"min": 1}},
        'unknown field "spec.replica"',
    ),
    _case(
        "pool-kv-target-above-one",
        "InferencePool",
        {"autoscaling": {"targetKvCacheUsage": 1.5}},
        "should be less than or equal to 1",
    ),
    _case(
        "pool-unknown-routing-policy",
        "InferencePool",
        {"routing": {"policy": "Random"}},
        'Unsupported value: "Random"',
    ),
    _case(
        "pool-cpu-with-a-gpu-product",
        "InferencePool",
        {"accelerator": {"kind": "CPU", "cpu": "4", "memory": "16Gi"}},
        "accelerator.product names a GPU model",
    ),
    _case(
        "pool-cpu-with-two-gpus",
        "InferencePool",
        {"accelerator": {"kind": "CPU", "product": "", "count": 2, "cpu": "4", "memory": "16Gi"}},
        "accelerator.count is GPUs per replica",
    ),
    _case(
        "pool-cpu-with-a-gpu-resource",
        "InferencePool",
        {
            "accelerator": {
                "kind": "CPU",
                "product": "",
                "resourceName": "amd.com/gpu",
                "cpu": "4",
                "memory": "16Gi",
            }
        },
        "a CPU pool requests none",
    ),
    _case(
        "pool-cpu-without-memory",
        "InferencePool",
        {"accelerator": {"kind": "CPU", "product": "", "cpu": "4"}},
        "a CPU pool must say what each replica requests",
    ),
    _case(
        "pool-gpu-with-cpu-sizing",
        "InferencePool",
        {"accelerator": {"memory": "16Gi"}},
        "accelerator.cpu and accelerator.memory size the replicas of CPU pools",
    ),
    _case(
        "pool-unknown-device",
        "InferencePool",
        {"accelerator": {"kind": "TPU"}},
        'Unsupported value: "TPU"',
    ),
    _case(
        "model-empty-image",
        "ModelDeployment",
        {"engine": {"image": ""}},
        "at least 1 chars long",
    ),
    _case(
        "model-extra-args-widen-reach",  # issue #35: prompts could read the worker's files
        "ModelDeployment",
        {"engine": {"extraArgs": ["--seed", "1", "--allowed_local_media_path=/"]}},
        "extraArgs may not set --allowed_local_media_path=/",
    ),
    _case(
        "model-kv-cache-not-a-quantity",
        "ModelDeployment",
        {"engine": {"kvCacheMemory": "8 GB"}},
        "should match",
    ),
    _case(
        "model-two-trust-methods",
        "ModelDeployment",
        {"artifact": {"trust": {"sigstore": {"identity": "a@b.c", "issuer": "https://x"}}}},
        "set exactly one trust method",
    ),
    _case(
        "model-no-trust-method",
        "ModelDeployment",
        {"artifact": {"trust": {"publicKey": DELETE}}},
        "set exactly one trust method",
    ),
    _case(
        "model-canary-weight-zero",
        "ModelDeployment",
        {"rollout": {"steps": [{"weight": 0}]}},
        "should be greater than or equal to 1",
    ),
    _case(
        "model-canary-weight-over-100",
        "ModelDeployment",
        {"rollout": {"steps": [{"weight": 150}]}},
        "should be less than or equal to 100",
    ),
    _case(
        "model-canary-weights-descending",
        "ModelDeployment",
        {"rollout": {"steps": [{"weight": 50}, {"weight": 10}]}},
        "weights must be strictly ascending",
    ),
    _case(
        "model-canary-weights-repeated",
        "ModelDeployment",
        {"rollout": {"steps": [{"weight": 50}, {"weight": 50}]}},
        "weights must be strictly ascending",
    ),
    _case(
        "model-abort-and-promote",
        "ModelDeployment",
        {"rollout": {"abort": True, "promote": True}},
        "abort and promote cannot both be true",
    ),
    _case(
        "model-bad-digest",
        "ModelDeployment",
        {"artifact": {"digest": "md5:abc"}},
        "should match '^sha256:",
    ),
    _case(
        "model-file-artifact-remote-signature",
        "ModelDeployment",
        {"artifact": {"signatureUri": "https://sigs.example/model.sig"}},
        "a file:// artifact needs a file:// signature",
    ),
    _case(
        "model-signature-bad-scheme",
        "ModelDeployment",
        {"artifact": {"signatureUri": "ftp://x/model.sig"}},
        "should match",
    ),
    _case(
        "model-zero-ttft-ceiling",
        "ModelDeployment",
        {"rollout": {"analysis": {"maxTtftP99Ms": 0}}},
        "should be greater than or equal to 1",
    ),
    _case("model-missing-model", "ModelDeployment", {"model": DELETE}, "Required value"),
    _case(
        "model-fallback-to-itself",
        "ModelDeployment",
        {"fallback": {"model": "demo-model"}},
        "fallback.model must name another model",
    ),
    _case("model-no-pools", "ModelDeployment", {"pools": []}, "should have at least 1 items"),
    _case(
        "tenant-zero-quota",
        "Tenant",
        {"quotas": {"tokensPerMinute": 0}},
        "should be greater than or equal to 1",
    ),
    _case(
        "tenant-negative-concurrency",
        "Tenant",
        {"quotas": {"maxConcurrent": -1}},
        "should be greater than or equal to 1",
    ),
    _case(
        "tenant-day-quota-below-minute-quota",
        "Tenant",
        {"quotas": {"tokensPerMinute": 1000, "tokensPerDay": 10}},
        "quotas.tokensPerDay must be at least quotas.tokensPerMinute",
    ),
    _case(
        "tenant-shared-group-without-group",
        "Tenant",
        {"cacheIsolation": {"mode": "SharedGroup"}},
        "group must be set when mode is SharedGroup",
    ),
    _case(
        "tenant-budget-with-tokens-and-amount",
        "Tenant",
        {"budget": {"tokens": 1000, "amount": 5.0}},
        "budget: set exactly one of tokens and amount",
    ),
    _case(
        "tenant-budget-without-limit",
        "Tenant",
        {"budget": {"action": "Reject"}},
        "budget: set exactly one of tokens and amount",
    ),
    _case(
        "tenant-downgrade-without-model",
        "Tenant",
        {"budget": {"tokens": 1000, "action": "Downgrade"}},
        "downgradeTo must name a model when action is Downgrade",
    ),
    _case(
        "tenant-zero-share",
        "Tenant",
        {"share": 0},
        "should be greater than or equal to 1",
    ),
    _case(
        "pool-negative-gpu-price",
        "InferencePool",
        {"cost": {"perGpuHour": -1}},
        "should be greater than or equal to 0",
    ),
    _case(
        "pool-input-token-price-without-output",
        "InferencePool",
        {"cost": {"perGpuHour": 1, "perMillionInputTokens": 0.5}},
        "cost: set both perMillionInputTokens and perMillionOutputTokens, or neither",
    ),
    _case("tenant-missing-allowed-models", "Tenant", {"allowedModels": DELETE}, "Required value"),
    _case(
        "tenant-class-name-with-spaces", "Tenant", {"priorityClass": "Gold Tier"}, "should match"
    ),
    _case(
        "model-adapters-without-lora",
        "ModelDeployment",
        {"adapters": {}},
        "adapters: serving ModelAdapters needs engine.lora",
    ),
    _case(
        "adapter-without-tenants", "ModelAdapter", {"tenants": []}, "should have at least 1 item"
    ),
    _case(
        "adapter-short-digest",
        "ModelAdapter",
        {"artifact": {"digest": "sha256:abc"}},
        "should match",
    ),
    _case(
        "adapter-tenant-name-with-capitals", "ModelAdapter", {"tenants": ["Acme"]}, "should match"
    ),
    _case(
        "route-without-default-targets",
        "ModelRoute",
        {"defaultTargets": []},
        "should have at least 1 item",
    ),
    _case(
        "route-rule-without-match",
        "ModelRoute",
        {"rules": [{"name": "all", "targets": [{"model": "demo-small"}]}]},
        "put its targets in defaultTargets instead",
    ),
    _case(
        "route-duplicate-rule-names",
        "ModelRoute",
        {"rules": [ROUTE_SPEC["rules"][0], ROUTE_SPEC["rules"][0]]},
        "rule names must be unique",
    ),
    _case(
        "route-classifier-rule-without-classifier",
        "ModelRoute",
        {
            "rules": [
                {"name": "hard", "match": {"classifierAbove": 0.5}, "targets": [{"model": "x"}]}
            ]
        },
        "classifierAbove and classifierBelow need spec.classifier",
    ),
    _case(
        "route-repeated-target",
        "ModelRoute",
        {"defaultTargets": [{"model": "demo-model"}, {"model": "demo-model", "weight": 3}]},
        "list each target model once",
    ),
    _case(
        "route-all-weights-zero",
        "ModelRoute",
        {"defaultTargets": [{"model": "demo-model", "weight": 0}]},
        "at least one target needs a weight above 0",
    ),
    _case(
        "route-targets-itself",
        "ModelRoute",
        {"defaultTargets": [{"model": "chat-auto"}]},
        "targets must name served models, not the route's own name",
    ),
    _case(
        "route-prompt-bounds-crossed",
        "ModelRoute",
        {
            "rules": [
                {
                    "name": "mid",
                    "match": {"minPromptTokens": 900, "maxPromptTokens": 100},
                    "targets": [{"model": "demo-small"}],
                }
            ]
        },
        "minPromptTokens must be at most maxPromptTokens",
    ),
    _case(
        "route-bad-header-name",
        "ModelRoute",
        {
            "rules": [
                {
                    "name": "h",
                    "match": {"headers": {"x task": "a"}},
                    "targets": [{"model": "demo-small"}],
                }
            ]
        },
        "keys must be HTTP header names",
    ),
    _case(
        "route-remote-names-repeat",
        "ModelRoute",
        {
            "remotes": [
                {
                    "name": "eu",
                    "kind": "Gateway",
                    "baseUrl": "https://eu.example.com/v1",
                    "apiKeySecret": {"name": "eu-key"},
                },
                {
                    "name": "eu",
                    "kind": "Gateway",
                    "baseUrl": "https://eu2.example.com/v1",
                    "apiKeySecret": {"name": "eu-key"},
                },
            ]
        },
        "remote names must be unique",
    ),
    _case(
        "route-openai-remote-without-model",
        "ModelRoute",
        {
            "remotes": [
                {
                    "name": "provider",
                    "kind": "OpenAI",
                    "baseUrl": "https://api.example.com/v1",
                    "apiKeySecret": {"name": "provider-key"},
                }
            ]
        },
        "an OpenAI remote needs model",
    ),
    _case(
        "adapter-file-artifact-remote-signature",
        "ModelAdapter",
        {"artifact": {"signatureUri": "https://example.com/demo.sig"}},
        "a file:// artifact needs a file:// signature",
    ),
]
