"""Capacity planning from token-level traffic: never guess a GPU count.

``planning`` turns a workload and a measured capacity profile into replicas with the seed's
equations; it reuses the operator's placement core for zone-loss headroom.
"""
