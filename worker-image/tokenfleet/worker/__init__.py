"""The worker image's entrypoint: verify the model artifact, then become ``vllm serve``.

Self-contained on purpose: the image copies only ``tokenfleet.signing`` and
``tokenfleet.worker`` next to vLLM, so nothing here may import the operator, the gateway or the
API models.
"""
