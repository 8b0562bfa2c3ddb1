"""Artifact trust: sign and verify model directories with OpenSSF model-signing.

``verdict`` is pure (the operator imports it to read a worker's termination message);
``keys``, ``fetch`` and ``verify`` do I/O and are used by the worker's init step, the node agent
and the ``python -m tokenfleet.signing`` CLI. Nothing here imports model_signing at module load
except ``verify``: the operator never pays for sigstore's import.
"""
