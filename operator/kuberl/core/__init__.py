"""The core: what the operator, `kuberl run`, the tools and the trainer share.

Pure: the spec model and its rules, Kubernetes' own validation, the YAML reader,
rendering, the lifecycle, the env and exit-code contract, names, the CRD, pod
security and schema, status and refusal builders, rank 0's metrics parsing.
It imports nothing of kuberl.operator, kuberl.local or kuberl.tools.
"""
