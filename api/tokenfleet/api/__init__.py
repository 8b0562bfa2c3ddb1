"""TokenFleet's API types: the three custom resources as frozen pydantic models.

Purely data: no I/O, no clocks, no Kubernetes client. The CRD YAML under ``crds/`` is rendered
from these models by :mod:`tokenfleet.api.crd`, so the API server and the Python code can never
disagree about a field, a default or a validation rule.
"""
