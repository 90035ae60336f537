"""kuberl data plane: DDP trainers. `python -m kuberl_trainer --config FILE`."""
