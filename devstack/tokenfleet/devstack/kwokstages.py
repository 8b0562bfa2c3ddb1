"""kwok Stage configs: how simulated nodes and pods move through their lives.

Ours differ from kwok's stock stages in two ways that matter: a pod becomes Running with an IP
but *not* Ready (the node agent marks it Ready once its simulated vLLM answers), and a node
labelled ``tokenfleet.io/simulated-outage=true`` stops heartbeating and turns NotReady at once,
which is how tests take a zone down. Worker pods are not deleted at once either: the node
agent drains and stops their engine first (``termination.py``), kwok only at the deadline.
"""

from __future__ import annotations

from tokenfleet.api import labels

_NODE_CONDITIONS = """
      {{ $now := Now }}
      conditions:
      {{ range NodeConditions }}
      - lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ $now | Quote }}
        message: {{ .message | Quote }}
        reason: {{ .reason | Quote }}
        status: {{ .status | Quote }}
        type: {{ .type | Quote }}
      {{ end }}"""

_READY_TRUE = """\
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: In
      values: ['True']"""

_READY_NOT_TRUE = """\
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: NotIn
      values: ['True']"""

_NO_OUTAGE = f"""\
    - key: '.metadata.labels["{labels.SIMULATED_OUTAGE}"]'
      operator: DoesNotExist"""

_IN_OUTAGE = f"""\
    - key: '.metadata.labels["{labels.SIMULATED_OUTAGE}"]'
      operator: In
      values: ['true']"""

STAGES = f"""\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: tokenfleet-node-up
spec:
  resourceRef: {{apiGroup: v1, kind: Node}}
  selector:
    matchExpressions:
{_NO_OUTAGE}
{_READY_NOT_TRUE}
  next:
    statusTemplate: |{_NODE_CONDITIONS}
      addresses:
      - address: {{{{ NodeIP | Quote }}}}
        type: InternalIP
      - address: {{{{ NodeName | Quote }}}}
        type: Hostname
      allocatable: {{{{ with .status.allocatable }}}}{{{{ YAML . 1 }}}}{{{{ else }}}}{{pods: "110"}}{{{{ end }}}}
      capacity: {{{{ with .status.capacity }}}}{{{{ YAML . 1 }}}}{{{{ else }}}}{{pods: "110"}}{{{{ end }}}}
      nodeInfo:
        architecture: amd64
        operatingSystem: linux
        kubeletVersion: simulated
        containerRuntimeVersion: simulated
      phase: Running
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: tokenfleet-node-heartbeat
spec:
  resourceRef: {{apiGroup: v1, kind: Node}}
  selector:
    matchExpressions:
{_NO_OUTAGE}
{_READY_TRUE}
  delay:
    durationMilliseconds: 4000
    jitterDurationMilliseconds: 6000
  next:
    statusTemplate: |{_NODE_CONDITIONS}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: tokenfleet-node-outage
spec:
  resourceRef: {{apiGroup: v1, kind: Node}}
  selector:
    matchExpressions:
{_IN_OUTAGE}
{_READY_TRUE}
  next:
    statusTemplate: |
      {{{{ $now := Now }}}}
      conditions:
      - lastHeartbeatTime: {{{{ $now | Quote }}}}
        lastTransitionTime: {{{{ $now | Quote }}}}
        message: "simulated outage: the node stopped heartbeating"
        reason: SimulatedOutage
        status: "False"
        type: Ready
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: tokenfleet-pod-start
spec:
  resourceRef: {{apiGroup: v1, kind: Pod}}
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: DoesNotExist
    - key: '.status.phase'
      operator: In
      values: ['Pending']
  next:
    statusTemplate: |
      {{{{ $now := Now }}}}
      conditions:
      - {{type: PodScheduled, status: "True", lastTransitionTime: {{{{ $now | Quote }}}}}}
      - {{type: Initialized, status: "True", lastTransitionTime: {{{{ $now | Quote }}}}}}
      - {{type: ContainersReady, status: "False", reason: Starting, lastTransitionTime: {{{{ $now | Quote }}}}}}
      - {{type: Ready, status: "False", reason: Starting, lastTransitionTime: {{{{ $now | Quote }}}}}}
      containerStatuses:
      {{{{ range .spec.containers }}}}
      - image: {{{{ .image | Quote }}}}
        name: {{{{ .name | Quote }}}}
        ready: false
        started: true
        restartCount: 0
        state:
          running:
            startedAt: {{{{ $now | Quote }}}}
      {{{{ end }}}}
      {{{{ with NodeIPWith .spec.nodeName }}}}
      hostIP: {{{{ . | Quote }}}}
      {{{{ end }}}}
      {{{{ $podIPs := PodIPsWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) ( or .metadata.name "" ) ( or .metadata.namespace "" ) }}}}
      {{{{ with $podIPs }}}}
      podIP: {{{{ index . 0 | Quote }}}}
      podIPs:
      {{{{ range . }}}}
      - ip: {{{{ . | Quote }}}}
      {{{{ end }}}}
      {{{{ end }}}}
      phase: Running
      startTime: {{{{ $now | Quote }}}}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: tokenfleet-pod-delete
spec:
  resourceRef: {{apiGroup: v1, kind: Pod}}
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: Exists
    - key: '.metadata.labels["{labels.ROLE}"]'
      operator: NotIn
      values: ['{labels.ROLE_WORKER}']
  next:
    delete: true
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: tokenfleet-worker-pod-deadline
spec:
  resourceRef: {{apiGroup: v1, kind: Pod}}
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: Exists
    - key: '.metadata.labels["{labels.ROLE}"]'
      operator: In
      values: ['{labels.ROLE_WORKER}']
  # A worker pod is deleted by the node agent once its engine has drained and stopped (as a
  # kubelet does); this is the backstop at the grace deadline, the deletionTimestamp.
  delay:
    durationMilliseconds: 0
    durationFrom:
      expressionFrom: '.metadata.deletionTimestamp'
  next:
    delete: true
"""
