"""Where the pod's absolute paths live on this host."""

from __future__ import annotations

import os

from kuberl.core import contract


def host_path(path: str) -> str:
    """The pod's absolute `path`, under KUBERL_FS_ROOT when pods run as local
    processes (`kuberl run`), unchanged in a real pod."""
    root = os.environ.get(contract.ENV_FS_ROOT)
    if root and os.path.isabs(path):
        return os.path.join(root, path.lstrip("/"))
    return path


def pod_path(path: str) -> str:
    """`host_path`'s inverse, for what a rank says: the path as the pod sees it (/checkpoints/…), which `kuberl run`
    shows where it lies here, as a cluster's `kubectl logs` shows it."""
    root = os.environ.get(contract.ENV_FS_ROOT)
    if root and os.path.isabs(path) and os.path.commonpath([root, path]) == os.path.normpath(root):
        return "/" + os.path.relpath(path, root).removeprefix(".")
    return path


def on_this_machine() -> bool:
    """Whether the pod runs as a local process (`kuberl run`): its volumes are directories of this machine, no claims."""
    return bool(os.environ.get(contract.ENV_FS_ROOT))
