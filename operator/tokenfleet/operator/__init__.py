"""The kopf operator: makes the cluster match InferencePools, ModelDeployments and Tenants.

Pure decisions live in ``policy/`` (placement, scaling, rollout) and ``desired.py``; only
``k8s.py`` talks to the API server; handlers are thin shells (parse → decide → act → report).
"""
