"""The operator's planners (pure): observed state and specs in, manifests, status, events out.

Nothing in this package talks to the API server, reads a clock or logs: the loop gathers the
inputs, calls a planner and carries out what it returns. An import-linter contract protects the
whole package, so a new module here is pure by construction.
"""
