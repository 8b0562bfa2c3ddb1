"""Every label and annotation key TokenFleet reads or writes: one home for the vocabulary."""

from __future__ import annotations

PREFIX = "tokenfleet.io"

#: Role of a pod: "worker" pods run an inference engine (and get a simulator in the local stack).
ROLE = f"{PREFIX}/role"
ROLE_WORKER = "worker"

POOL = f"{PREFIX}/pool"
MODEL = f"{PREFIX}/model"
REVISION = f"{PREFIX}/revision"
ZONE = f"{PREFIX}/zone"

#: Standard Kubernetes node labels.
TOPOLOGY_ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"
GPU_PRODUCT = "nvidia.com/gpu.product"
GPU_RESOURCE = "nvidia.com/gpu"
#: Every namespace's own name as a label (the API server sets it): NetworkPolicy peers use it.
NAMESPACE_NAME = "kubernetes.io/metadata.name"

#: On a Secret, value "true": it holds API key hashes. Gateways watch only such Secrets, and the
#: operator counts a tenant's keys from their metadata (the data entries' names).
API_KEY_SECRET = f"{PREFIX}/api-keys"
#: On a ConfigMap holding a ModelRoute classifier's weights ("true"): the gateways watch only
#: ConfigMaps with it, so they never hold the cluster's other ConfigMaps in memory.
ROUTE_CLASSIFIER = f"{PREFIX}/route-classifier"

#: On a Tenant: how many API keys its Secret holds (written by `tokenfleet tenant create-key`,
#: so the operator can report it without permission to read Secrets).
API_KEY_COUNT = f"{PREFIX}/api-key-count"

#: Local stack only: marks a simulated node; kwok manages it and the node agent runs its pods.
SIMULATED_NODE = f"{PREFIX}/simulated-node"
#: Local stack only: set to "true" on a simulated node to take it down (NotReady at once).
SIMULATED_OUTAGE = f"{PREFIX}/simulated-outage"
#: Local stack only: extra llm-d-inference-sim flags for a worker pod, space-separated.
SIM_ARGS = "sim.tokenfleet.io/args"
#: Local stack only: seconds a simulated worker takes to load before it answers (a GPU's cold
#: start: weights, compilation, warm-up); the pod stays not Ready meanwhile.
SIM_COLD_START = "sim.tokenfleet.io/cold-start-seconds"
#: Annotations of a ModelDeployment under this prefix are copied onto its worker pods (so the
#: local stack's simulators can be given latency or failures); real engines ignore them.
SIM_PREFIX = "sim.tokenfleet.io/"
#: Local stack only: set to "true" (on a ModelDeployment, copied to its pods, or on a pod) and
#: the node agent verifies the pod's artifact, as the worker image would, before its simulator
#: starts. Opt-in until every fixture points at a signed artifact.
SIM_VERIFY_ARTIFACT = "sim.tokenfleet.io/verify-artifact"
#: On a worker pod: the artifact verification verdict (JSON, tokenfleet.signing.verdict), where
#: the operator can read it; the node agent writes it in the local stack.
VERDICT = f"{PREFIX}/verdict"
#: On a worker Deployment's pod template (so on its pods): the trust fingerprint its workers
#: were restarted to verify against, after a refusal under a trust Secret that has changed
#: since. The operator sets it as `kubectl rollout restart` sets its annotation; a pod without
#: it was started before any such restart.
TRUST_FINGERPRINT = f"{PREFIX}/trust-fingerprint"
#: On a worker Deployment's pod template (so on its pods): a fingerprint of the engine key its
#: pods serve behind (tokenfleet.api.engine_key.fingerprint). A pod reads the key from its
#: Secret once, at start: a new key (the per-namespace key on upgrade, a rotated installation
#: key) changes the template, so the workers roll onto it instead of refusing the gateway.
ENGINE_KEY_FINGERPRINT = f"{PREFIX}/engine-key-fingerprint"
