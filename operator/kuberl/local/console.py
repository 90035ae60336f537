"""What `kuberl run` shows a person: on a terminal one live progress bar (tqdm: percent, steps/s,
ETA, return, eval) with the pods' other lines above it; in a pipe or a file, plain lines.

The pods' output reaches the console through `Console.write` (every line is kept whole in the pod's
log file regardless): rank 0's periodic progress line is what the bar shows, so on a terminal it is
not printed; checkpoint lines only with `-v`; the checkpoint volume's in-pod path (/checkpoints/…)
is shown where it lies here, relative to the current directory.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from typing import IO, Any

from ..core import names
from ..core.contract import shown_return
from .sandbox import pod_roots_dir

PROGRESS_LINE = re.compile(r"^\[(?:rank|worker) 0\] timesteps \d+  steps/s ")
CHECKPOINT_LINE = re.compile(r"^\[(?:rank|worker) 0\] checkpoint ")


def shown(path: str) -> str:
    """Paths under the current directory read best relative to it."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def _number(value: float | None) -> str:
    return shown_return(value)


def with_host_paths(line: str, host_checkpoints: str) -> str:
    """`line` with the checkpoint volume's pod paths (/checkpoints/…) shown where they lie here."""
    mount = names.CHECKPOINT_MOUNT_DIR.rstrip("/") + "/"
    here = shown(host_checkpoints).rstrip("/") + "/"
    # the same volume as a rank opens it here, through its pod's root (sandbox.pod_roots_dir's <pod>/root/checkpoints/…,
    # or an older kuberl's runs/<job>/pods/<pod>/root/checkpoints/…)
    run_dir = os.path.dirname(os.path.abspath(host_checkpoints))
    for roots in (pod_roots_dir(run_dir), os.path.join(run_dir, "pods")):
        line = re.sub(re.escape(roots) + r"/[^/\s]+/root" + re.escape(mount), lambda _: here, line)
    return line.replace(" " + mount, " " + here)


class Console:
    """The runner's and the pods' lines, and on a terminal the progress bar below them."""

    def __init__(self, stream: IO[str], total_timesteps: int | None, host_checkpoints: str | None = None,
                 verbose: bool = False, live: bool | None = None, return_label: str = "return"):
        self.stream, self.total, self.verbose, self.return_label = stream, total_timesteps, verbose, return_label
        self.tqdm = _tqdm() if live is not False else None
        self.live = bool(self.tqdm and total_timesteps and (live or (live is None and _isatty(stream))))
        self.host_checkpoints = host_checkpoints
        self.bar: Any = None
        self.lock = threading.Lock()

    # -- lines ---------------------------------------------------------------------------

    def write(self, text: str) -> None:
        """A pod's output (already prefixed and escaped), as a PodProcess writes it."""
        for line in text.splitlines():
            if CHECKPOINT_LINE.match(line) and not self.verbose:
                continue
            if self.live and PROGRESS_LINE.match(line):
                continue
            self.line(line)

    def flush(self) -> None:
        self.stream.flush()

    @property
    def reader_gone(self) -> bool:
        """Whoever read the output stopped reading (`Output`)."""
        return bool(getattr(self.stream, "reader_gone", False))

    def line(self, line: str) -> None:
        """One line above the bar, the checkpoint volume's paths shown where they lie here."""
        if self.host_checkpoints:
            line = with_host_paths(line, self.host_checkpoints)
        with self.lock:
            if self.bar is not None:
                self.bar.clear()
                self.stream.write(line + "\n")
                self.bar.refresh()
            else:
                self.stream.write(line + "\n")
            self.stream.flush()

    # -- the bar -------------------------------------------------------------------------

    def progress(self, timesteps: int | None, episode_return: float | None, eval_return: float | None) -> None:
        """Rank 0's latest reading; the first one starts the bar where a resumed run stands."""
        if not self.live or timesteps is None:
            return
        with self.lock:
            if self.bar is None:
                self.bar = self.tqdm(total=self.total, initial=min(timesteps, self.total), unit="step", unit_scale=True,
                                     dynamic_ncols=True, file=self.stream, smoothing=0.3, leave=False, mininterval=0.5)
            self.bar.set_postfix_str(f"{self.return_label} {_number(episode_return)}  eval {_number(eval_return)}", refresh=False)
            self.bar.update(max(0, min(timesteps, self.total) - self.bar.n))
            self.bar.refresh()  # one reading a second at most (the runner's scrapes): each is shown

    def close(self) -> None:
        with self.lock:
            if self.bar is not None:
                self.bar.close()
                self.bar = None


class Output:
    """`kuberl run`'s stdout. When its reader goes away (`| head`, a pager quit, the terminal closed) a write
    no longer raises BrokenPipeError (or EIO), which ended the run in a traceback with every rank killed
    unsaved: the rest goes to `fallback` (stderr: the terminal, in `kuberl run job.yaml | head`), and `reader_gone` asks the run to
    stop as Ctrl-C does."""

    def __init__(self, stream: IO[str], fallback: IO[str]):
        self.stream, self.fallback = stream, fallback
        self.reader_gone = False

    def write(self, text: str) -> int:
        if not self.reader_gone:
            try:
                return self.stream.write(text)
            except OSError:  # EPIPE: `| head` has read enough; EIO: the terminal closed (SIGHUP)
                self._gone()
        with contextlib.suppress(OSError, ValueError):  # `2>&1 | head`: stderr went with it; the logs keep every line
            self.fallback.write(text)
        return len(text)

    def flush(self) -> None:
        if not self.reader_gone:
            try:
                self.stream.flush()
                return
            except OSError:
                self._gone()
        with contextlib.suppress(OSError, ValueError):
            self.fallback.flush()

    def isatty(self) -> bool:
        return not self.reader_gone and _isatty(self.stream)

    def _gone(self) -> None:
        self.reader_gone = True
        # what the stream still buffers would fail again at exit ("Exception ignored … BrokenPipeError")
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
        except OSError:
            return
        try:
            os.dup2(devnull, self.stream.fileno())
        except (OSError, ValueError, AttributeError):  # no descriptor (a StringIO): nothing buffered at exit
            pass
        finally:
            os.close(devnull)


def _isatty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _tqdm() -> Any:
    try:
        from tqdm import tqdm
    except ImportError:  # the progress extra is not installed: plain lines
        return None
    return tqdm
