"""kuberl control plane. Never imports torch: the operator image stays small."""
