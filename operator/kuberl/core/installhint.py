"""Install commands kuberl prints name the pip of the Python that runs it (sys.executable), never a bare `pip`:
in the README's flow (.venv/bin/kuberl, no venv activated) a bare pip is often another Python's, and installed
nothing kuberl, or kuberl run's pods, then saw."""

from __future__ import annotations

import re
import shlex


def pip_install(executable: str) -> str:
    """The command that installs into the Python running as `executable` (sys.executable): its own pip. A bare `pip`
    is often another Python's (the README runs `.venv/bin/kuberl` without activating the venv), and there it
    installed nothing kuberl run's pods see."""
    return f"{shlex.quote(executable)} -m pip install"


def with_this_pip(message: str, executable: str) -> str:
    """A package's install hint (gymnasium's `pip install swig` followed by `pip install "gymnasium[box2d]"`) with each
    bare `pip install` (or pip3) made `executable`'s own (`pip_install`)."""
    return re.sub(r"(?<!-m )(?<![\w./-])pip3? install", lambda _: pip_install(executable), message)
