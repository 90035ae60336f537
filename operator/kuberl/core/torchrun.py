"""torchrun's own process count (and node count), read from a container's command line.

torch.distributed.run takes `--nproc-per-node` (or `--nproc_per_node`) from its command line over
PET_NPROC_PER_NODE, the variable kuberl sets from spec.procsPerWorker: a command line that says 4
starts 4 processes in a pod whose WORLD_SIZE, CPU limit and OMP_NUM_THREADS were sized for another
count. This module finds that flag (torchrun, `python -m torch.distributed.run`,
`torch.distributed.launch`, and the same inside an `sh -c` script) and tells how it agrees with
the job's process count. Pure: lists of strings in, values out.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass

from . import contract

LAUNCH_MODULES = ("torch.distributed.run", "torch.distributed.launch")
NPROC_FLAGS = ("--nproc-per-node", "--nproc_per_node")
# The launchers' options that take no value (torch/distributed/run.py `check_env` actions; launch.py's
# --use-env): every other option's value is the next word unless written `--flag=value`.
NO_VALUE = frozenset({"--standalone", "-m", "--module", "--no-python", "--no_python", "--run-path", "--run_path",
                      "--virtual-local-rank", "--virtual_local_rank", "--use-env", "--use_env"})
SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh"})
WORDS = ("auto", "cpu", "gpu")
MAX_SCRIPT_CHARS = 64 * 1024  # an inline script longer than this is not searched (shlex is linear, but why spend it)


@dataclass(frozen=True)
class Nproc:
    """The flag as found: `value` as written (None: it cannot be read, and `problem` says why), and
    `where`, the field path of the word that holds it (relative to the container)."""

    value: str | None
    where: str
    problem: str | None = None

    @property
    def count(self) -> int | None:
        return int(self.value) if self.value is not None and whole_number(self.value) else None


def _python(word: str) -> bool:
    return bool(re.fullmatch(r"python[0-9.]*", os.path.basename(word)))


def _launcher_end(words: list[str], start: int) -> int | None:
    """The index just past the launcher's name in `words[start:]` (torchrun, or python [opts] -m torch.distributed.run)."""
    for i in range(start, len(words)):
        word = words[i]
        if os.path.basename(word) == "torchrun":
            return i + 1
        if _python(word):
            j = i + 1
            while j < len(words) and words[j].startswith("-") and words[j] != "-m":
                j += 1  # python's own flags: -u, -O, -X...
            if j + 1 < len(words) and words[j] == "-m" and words[j + 1] in LAUNCH_MODULES:
                return j + 2
    return None


def _nproc_in(words: list[str], start: int, flags: tuple[str, ...] = NPROC_FLAGS) -> tuple[str, int] | None:
    """(value, index of the word that holds it) of the launcher's nproc flag (or another of `flags`), before its
    script; the last one where it is written twice, as torchrun's argparse keeps it."""
    i, found = start, None
    while i < len(words):
        word = words[i]
        if not word.startswith("-") or word == "-":
            return found  # the training script: what follows is its own
        name, eq, value = word.partition("=")
        if name in flags:
            found = (value, i) if eq else (words[i + 1], i + 1) if i + 1 < len(words) else found
        i += 1 if eq or name in NO_VALUE else 2
    return found


# python's own options that take the next word as their value (`python -W ignore train.py`)
PYTHON_VALUE_OPTIONS = frozenset({"-W", "-X", "--check-hash-based-pycs"})
NOT_A_SCRIPT = frozenset({"-m", "--module"})  # the launcher runs a module (--no-python: a program, still a file)


def entry_script(words: list[str]) -> int | None:
    """The index in a command line (command and args, as the kubelet joins them) of the script it runs, where a word
    of its own names one: the program itself (`/app/run.sh`), python's script (`python [options] train.py`), or torch's
    launcher's (`torchrun [options] train.py`, `python -m torch.distributed.run [options] train.py`). Only that
    position: a later word is the script's own argument (`train.py --config made_later.py`), an option's value is the
    option's (`torchrun --log-dir x.py train.py`). None for a module (`-m`), inline code (`-c`), stdin (`-`), or
    another program (a shell), whose words are its own."""
    if not words:
        return None
    if os.path.basename(words[0]) == "torchrun":
        return _launched_script(words, 1)
    if not _python(words[0]):
        return 0
    i = 1
    while i < len(words) and words[i].startswith("-") and words[i] != "-":
        word = words[i]
        if word == "-m":
            return _launched_script(words, i + 2) if i + 1 < len(words) and words[i + 1] in LAUNCH_MODULES else None
        if not word.startswith("--") and word[1] not in "WX" and ("c" in word[1:] or "m" in word[1:]):
            return None  # -c code, or flags run together before it (-uc, -Bm)
        i += 2 if word in PYTHON_VALUE_OPTIONS else 1
    return i if i < len(words) and words[i] != "-" else None


def _launched_script(words: list[str], start: int) -> int | None:
    """The index of torch's launcher's script, its options from `start` skipped as the launcher reads them."""
    i = start
    while i < len(words) and words[i].startswith("-") and words[i] != "-":
        name, eq, _ = words[i].partition("=")
        if name in NOT_A_SCRIPT:
            return None
        i += 1 if eq or name in NO_VALUE else 2
    return i if i < len(words) and words[i] != "-" else None


def _shell_script(words: list[str]) -> int | None:
    """The index of the script of `sh -c SCRIPT` (any shell, with its own flags before -c)."""
    for i, word in enumerate(words[:-1]):
        if os.path.basename(word) in SHELLS:
            for j in range(i + 1, len(words) - 1):
                if re.fullmatch(r"-[a-z]*c[a-z]*", words[j]):
                    return j + 1
                if not words[j].startswith("-"):
                    break
            return None
    return None


def find(command: list | None, args: list | None, flags: tuple[str, ...] = NPROC_FLAGS) -> Nproc | None:
    """torchrun's nproc flag (or another of `flags`) in a container's command and args (as the kubelet joins
    them), or None."""
    command = command if isinstance(command, list) else []
    args = args if isinstance(args, list) else []
    words = [w for w in [*command, *args] if isinstance(w, str)]
    if len(words) != len(command) + len(args):
        return None  # not strings: validation names them

    def where(index: int) -> str:
        return f"command[{index}]" if index < len(command) else f"args[{index - len(command)}]"

    end = _launcher_end(words, 0)
    if end is not None:
        found = _nproc_in(words, end, flags)
        return Nproc(found[0], where(found[1])) if found else None
    script = _shell_script(words)
    if script is None or len(words[script]) > MAX_SCRIPT_CHARS:
        return None
    text = words[script]
    if "torchrun" not in text and not any(m in text for m in LAUNCH_MODULES):
        return None
    try:
        inner = shlex.split(text, comments=True)
    except ValueError as e:
        return Nproc(None, where(script), f"the {words[script - 2] if script >= 2 else 'shell'} -c script cannot be"
                     f" read for torchrun's {flags[0]} ({e})")
    start = 0
    while (end := _launcher_end(inner, start)) is not None:
        found = _nproc_in(inner, end, flags)
        if found:
            return Nproc(found[0], f"{where(script)} (the shell script)")
        start = end
    return None


def launches(command: list | None, args: list | None) -> bool:
    """Whether the command starts torch's launcher (directly, or in an `sh -c` script): only then does a
    process count (PET_NPROC_PER_NODE) start more than the one process the command is."""
    words = [w for w in [*(command if isinstance(command, list) else []), *(args if isinstance(args, list) else [])]
             if isinstance(w, str)]
    if _launcher_end(words, 0) is not None:
        return True
    script = _shell_script(words)
    return script is not None and ("torchrun" in words[script] or any(m in words[script] for m in LAUNCH_MODULES))


# Python's int() reads at most this many digits (sys.int_info.default_max_str_digits), torchrun's int() too
MAX_DIGITS = 4300


def whole_number(value: str) -> bool:
    """ASCII digits only: str.isdigit() also takes a superscript two, which int() (and so torchrun) refuses;
    and no more than int() reads (it raised ValueError out of kuberl validate, convert and the operator)."""
    return value.isascii() and value.isdigit() and len(value) <= MAX_DIGITS


def readable(value: str) -> bool:
    """A value kuberl reads as torchrun does (digits or one of its words), not a shell or $(VAR) expansion."""
    return (value.isascii() and value.isdigit()) or value in WORDS


def procs_problem(nproc: Nproc, procs: int, procs_set: bool, gpus: int) -> str | None:
    """Why the flag disagrees with the job's processes per pod (`procs` after defaulting, `procs_set`
    when spec.procsPerWorker was written), or None when it agrees."""
    flag = f"torchrun's --nproc-per-node {nproc.value!r}" if nproc.value is not None else ""
    if nproc.problem:
        return nproc.problem + ": set the flag to spec.procsPerWorker's value, or drop it (kuberl sets PET_NPROC_PER_NODE)"
    assert nproc.value is not None
    if not readable(nproc.value):
        return (f"{flag} cannot be read here (a shell or $(VAR) expansion, or no count): write spec.procsPerWorker's"
                " value, or drop the flag (kuberl sets PET_NPROC_PER_NODE from spec.procsPerWorker)")
    if nproc.value not in WORDS and not whole_number(nproc.value):
        return (f"torchrun's --nproc-per-node of {len(nproc.value)} digits is more than its int() reads ({MAX_DIGITS}):"
                " torchrun refuses it at start; write spec.procsPerWorker's value, or drop the flag")
    if nproc.count is not None:
        if nproc.count != procs:
            return (f"{flag} starts {nproc.count} process(es) per pod, spec.procsPerWorker is {procs}"
                    f"{'' if procs_set else ' (its default)'}: make them equal, or drop the flag")
        return None
    word = nproc.value
    if word == "gpu" or (word == "auto" and gpus):
        if not gpus:
            return f"{flag} counts CUDA devices, and spec.gpusPerWorker is 0: set spec.gpusPerWorker, or a number"
        if procs != gpus:
            return f"{flag} starts one process per GPU ({gpus}), spec.procsPerWorker is {procs}: make them equal"
        return None
    if not procs_set:
        return (f"{flag} starts one process per CPU in torch's affinity mask (the node's cores, not the pod's CPU"
                " limit: a 4-CPU pod on a 64-core node starts 64): set spec.procsPerWorker, or a number")
    return None


NNODES_FLAGS = ("--nnodes",)
RDZV_BACKEND_FLAGS = ("--rdzv-backend", "--rdzv_backend")


def torchrun_node_bounds(value: str) -> tuple[int, int] | str:
    """(MIN, MAX) as torchrun reads --nnodes (run.py's parse_min_max_nnodes: Python's int() of N or MIN:MAX, then
    `0 < MIN <= MAX` in config_from_args), or why it refuses the value at start."""
    parts = value.split(":")
    expected = "a node count N, or MIN:MAX with 0 < MIN <= MAX"
    if len(parts) > 2:
        return f"torchrun refuses --nnodes {value!r} (not in MIN:MAX format): write {expected}"
    try:
        low, high = int(parts[0]), int(parts[-1])
    except ValueError:
        return f"torchrun refuses --nnodes {value!r} (not a whole number): write {expected}"
    if not 0 < low <= high:
        return f"torchrun refuses --nnodes {value!r} (it needs 0 < MIN <= MAX): write {expected}"
    return low, high


def nnodes_problem(nnodes: Nproc, workers: int, static: bool = False) -> str | None:
    """Why torchrun's --nnodes (N, or MIN:MAX for an elastic rendezvous) disagrees with the job's pods, or is a
    value torchrun refuses at start (every pod would fail alike until backoffLimit); None when it agrees, cannot
    be read (a shell or $(VAR) expansion: it may be right), or is 1 (each pod its own world, as
    docs/local-runs.md allows)."""
    value = nnodes.value or ""
    if nnodes.value is None or "$" in value or "`" in value:
        return None
    bounds = torchrun_node_bounds(value)
    if isinstance(bounds, str):
        return bounds
    low, high = bounds
    if static and low <= workers < high and high > 1:
        # torch/distributed/elastic/rendezvous/static_tcp_rendezvous.py create_rdzv_handler: world_size = max_nodes
        return (f"torchrun's --nnodes {value!r} under its static rendezvous (its default: no --rdzv-backend, and kuberl"
                f" sets no PET_RDZV_BACKEND) waits for MAX, {high} nodes, and spec.workers starts {workers} pod(s): the"
                f" rendezvous never completes; write --nnodes={workers}, or add --rdzv-backend=c10d (it meets at worker 0"
                " too, and starts with the pods there are), or drop the flag (kuberl sets PET_NNODES from spec.workers)")
    if low <= workers <= high or high == 1:  # 1: a world of its own in each pod (as --standalone), by choice
        return None
    waits = (f"torchrun's --nnodes {value!r} waits for {low} node(s)" if low == high
             else f"torchrun's --nnodes {value!r} takes {low} to {high} nodes")
    return (f"{waits}, and spec.workers starts {workers} pod(s)"
            + (": the rendezvous never completes" if low > workers else ": the pods past it fail their rendezvous")
            + "; make them agree, or drop the flag (kuberl sets PET_NNODES from spec.workers)")


def literal_env(container: dict) -> dict[str, str]:
    """The container's env values the kubelet's expansion can be known to give (`value`, each expanded from those
    before it, as makeEnvironmentVariables does); a name set by valueFrom is left out, as is envFrom."""
    known: dict[str, str] = {}
    for entry in container.get("env") if isinstance(container.get("env"), list) else []:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            continue
        value = entry.get("value")
        if isinstance(value, str) and "valueFrom" not in entry:
            known[entry["name"]] = contract.expand(value, known)
        else:
            known.pop(entry["name"], None)
    return known


def _expanded(words: object, known: dict[str, str]) -> object:
    if not known or not isinstance(words, list):
        return words
    return [contract.expand(w, known) if isinstance(w, str) and "$" in w else w for w in words]


def container_find(container: dict, flags: tuple[str, ...] = NPROC_FLAGS) -> Nproc | None:
    """`find` in what torchrun is given: the container's command and args once the kubelet expanded $(VAR)
    from its env (`--nproc_per_node=$(NPROC)` with NPROC "4" is 4)."""
    known = literal_env(container)
    return find(_expanded(container.get("command"), known), _expanded(container.get("args"), known), flags)


def _static_rendezvous(container: dict) -> bool:
    """Whether torchrun in the container is known to run its static rendezvous: no --rdzv-backend (or one of
    static), no --standalone (c10d), and no PET_RDZV_BACKEND in its env that could say otherwise (an envFrom
    may: unknown, so False)."""
    backend = container_find(container, RDZV_BACKEND_FLAGS)
    if backend is not None:
        return backend.value == "static"
    if container_find(container, ("--standalone",)) is not None or container.get("envFrom"):
        return False
    env = container.get("env") if isinstance(container.get("env"), list) else []
    if any(isinstance(e, dict) and e.get("name") == "PET_RDZV_BACKEND" for e in env):
        return literal_env(container).get("PET_RDZV_BACKEND") == "static"
    return True


def template_problem(spec: dict, unreadable: bool = False) -> tuple[str, str] | None:
    """(field path, message) where spec.template's `trainer` container runs torchrun with a process
    count other than the job's; None when it agrees or runs no launcher. A flag that cannot be read
    (a shell variable, a script shlex cannot split) is reported only when `unreadable`: it may be
    right, so the operator does not refuse it; kuberl validate and convert say so."""
    template = spec.get("template") if isinstance(spec, dict) else None
    pod = template.get("spec") if isinstance(template, dict) else None
    containers = pod.get("containers") if isinstance(pod, dict) else None
    for i, container in enumerate(containers if isinstance(containers, list) else []):
        if not (isinstance(container, dict) and container.get("name") == "trainer"):
            continue
        nproc = container_find(container)
        procs, gpus = spec.get("procsPerWorker"), spec.get("gpusPerWorker") or 0
        workers = spec.get("workers", 1)
        nnodes = container_find(container, NNODES_FLAGS)
        if not unreadable and nnodes is not None and isinstance(workers, int) and not isinstance(workers, bool):
            problem = nnodes_problem(nnodes, workers, _static_rendezvous(container))
            if problem:
                return f"spec.template.spec.containers[{i}].{nnodes.where.split(' ')[0]}", problem
        if nproc is None or not isinstance(gpus, int) or unreadable != (nproc.problem is not None or not readable(nproc.value or "")):
            return None
        problem = procs_problem(nproc, procs if isinstance(procs, int) else gpus or 1, isinstance(procs, int), gpus)
        return (f"spec.template.spec.containers[{i}].{nproc.where.split(' ')[0]}", problem) if problem else None
    return None
