"""`kuberl run`: a job on this machine, each pod a local process. Imports the core only."""
