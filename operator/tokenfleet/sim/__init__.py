"""The fleet simulator: replay token-level traffic against a simulated fleet faster than real time.

Gateways run the product's admission and routing cores, the operator's scaling and placement
cores decide replicas, and replicas follow a vLLM-like performance model (``replica``).
"""
