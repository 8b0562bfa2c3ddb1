"""The operator's Prometheus metric names: fleet state as the operator last reported it.

Every series names the object it describes (``namespace`` plus ``pool`` or ``model``), so the
scrape job keeps them (honor_labels) and dashboards join them with the workers' series.
"""

from __future__ import annotations

POOL_REPLICAS = "tokenfleet_operator_pool_replicas"  # namespace, pool, zone: desired
POOL_READY = "tokenfleet_operator_pool_ready_replicas"  # namespace, pool, zone
POOL_WARM_FLOOR = "tokenfleet_operator_pool_warm_floor_replicas"  # namespace, pool, zone
POOL_WARM = "tokenfleet_operator_pool_warm_replicas"  # namespace, pool
ZONE_HEALTHY = "tokenfleet_operator_pool_zone_healthy"  # namespace, pool, zone (1 or 0)
POOL_DEMAND = "tokenfleet_operator_pool_demand_replicas"  # namespace, pool, reason
POOL_RECOMMENDED = "tokenfleet_operator_pool_recommended_replicas"  # namespace, pool, signal
SCALING_DECISIONS = "tokenfleet_operator_scaling_decisions_total"  # namespace, pool, reason
CONDITION = "tokenfleet_operator_condition"  # kind, namespace, name, type, reason (1 or 0)
REVISION_WEIGHT = "tokenfleet_operator_revision_weight_percent"  # namespace, model, revision, role
REVISION_READY = "tokenfleet_operator_revision_ready_replicas"  # namespace, model, revision, role
ROLLOUT_PHASE = "tokenfleet_operator_rollout_phase"  # namespace, model, phase (1: current)
ROLLOUT_STEP = "tokenfleet_operator_rollout_step"  # namespace, model
ROLLOUT_STEP_STARTED = "tokenfleet_operator_rollout_step_started_timestamp_seconds"  # ns, model
