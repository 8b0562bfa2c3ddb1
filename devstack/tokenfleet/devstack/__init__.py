"""The local platform: a real Kubernetes control plane with simulated GPU nodes.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok are real binaries built
from Go modules (``tools/build.sh``). kwok turns Node objects into simulated nodes; the node
agent (:mod:`tokenfleet.devstack.nodeagent`) gives every Running worker pod a real
vLLM-compatible process (llm-d-inference-sim) reachable at the pod's loopback IP, and marks the
pod Ready only once that process answers. ``make up`` and the test suite's session fixture both
run :mod:`tokenfleet.devstack.stack`.
"""
