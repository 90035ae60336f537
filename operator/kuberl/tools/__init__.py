"""Tools around the job: `kuberl convert` (PyTorchJob, TrainJob) and the spec reference
generator. Import the core only."""
