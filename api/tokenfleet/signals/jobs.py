"""The scrape jobs TokenFleet's series come from (monitoring/scrape.yaml names them; the
PodMonitors set the same ``job`` label), so the operator can say which job to fix when a
signal has no data. A unit test keeps these in step with monitoring/scrape.yaml."""

from __future__ import annotations

WORKERS = "vllm"  # the inference engines: vllm:* series, labelled with namespace/pool/model
GATEWAY = "tokenfleet-gateway"  # the gateway replicas: queue age, requests, tenant usage
OPERATOR = "tokenfleet-operator"  # the operator's own fleet-state series
ALL = (WORKERS, GATEWAY, OPERATOR)
