"""The operator: kopf handlers, the Kubernetes API client, its configuration,
scraping rank 0 and its own metrics. Imports the core, never kuberl.local or kuberl.tools."""
