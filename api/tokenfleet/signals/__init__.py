"""Metric names (vLLM's and the gateway's) in one place, and parsing them into typed values."""
