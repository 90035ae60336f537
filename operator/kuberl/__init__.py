"""kuberl control plane, one room per audience: `core` (what everyone shares, the trainer
included), `operator` (the kopf operator), `local` (`kuberl run`), `tools` (`kuberl convert`,
the spec reference); `cli` is the command. Never imports torch: the operator image stays small."""
