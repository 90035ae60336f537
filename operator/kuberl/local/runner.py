"""`kuberl run JOB.yaml`: the job's very pods, as processes on this machine.

The pods are rendered by the operator's own functions (target "local") and
run by `kuberl.local.process`; this module plays the rest of the cluster:
- an address per pod (127.0.0.x: Linux routes all of 127/8 to loopback);
- cluster DNS by Kubernetes' rules, so a rendered name that would not resolve
  in a cluster does not resolve here either;
- the API server's store: the job's ConfigMap and those beside it in the file
  (each pod's configMap volumes are projected from them into its sandbox by
  `kuberl.local.process`), and the checkpoint claim as a directory under `runs/<job>/`;
- the control loop: observe the processes as pods, read rank 0's metrics,
  and let `kuberl.core.lifecycle.decide` choose what happens next, exactly as the
  operator does.

Ctrl-C suspends the job (the same lifecycle path as `runPolicy.suspend`):
every rank gets SIGTERM, saves a checkpoint and exits; whatever is still
running when the grace period ends is killed. Running the same command again
resumes from the checkpoint (same `runs/<job>`, same uid).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import difflib
import errno
import fcntl
import glob
import hashlib
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import stat
import sys
import time
import typing
import urllib.request
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Self

import yaml
from pydantic import BaseModel

from ..core import (
    contract,
    fingerprint,
    lifecycle,
    names,
    podschema,
    podsecurity,
    podsource,
    rank0metrics,
    safetext,
)
from ..core.contract import shown_return, training_return_label
from ..core.lifecycle import ObservedPod, Rank0Progress
from ..core.rank0metrics import Rank0Reading
from ..core.render import Job, render_configmap, render_pod, render_service
from ..core.rules import validate_job
from ..core.runrecords import (
    FINGERPRINT_FILE,
    RECORD_LIMIT,
    read_regular_file,
    recorded_learned_values,
)
from ..core.spec import ALGORITHM_BLOCKS, JobSpec
from ..core.validation import InvalidJob, Problem, metadata_problems
from ..core.validation import shown as shown_value
from ..core.yamlreader import UnreadableSpec, load_documents
from . import seeds
from .console import Console, Output, with_host_paths
from .curves import (
    PlotNotWritten,
    compare_note,
    finite_number,
    last_progress,
    newest_progress_file,
    plot,
    progress_files,
    progress_records,
    progress_tail,
)
from .dns import loopback_rendezvous
from .process import (
    PodProcess,
    container_base_env,
    containers_not_run,
    gpus_short,
    host_gpus,
    open_to_write,
    pod_gpus,
    private_network,
    processes_under,
    start_pod,
)
from .sandbox import (
    LocalRunError,
    absent_entry_script,
    at_template_fields,
    image_scripts,
    job_path_problems,
    kubelet_mount_paths,
    make_dirs,
    make_pod_roots,
    missing_script_failure,
    pod_roots_dir,
    remove_tree,
    runtime_dir,
    template_fields,
)

NAMESPACE = "default"
# beside the jobs' run directories: every PVC a job mounts that is not its own checkpoint claim
SHARED_CLAIMS_DIR = "_claims"
CLUSTER_DOMAIN = "cluster.local"
POLL_SECONDS = 0.2
SCRAPE_EVERY_SECONDS = 1.0
CLOCK_JUMP_SECONDS = 5.0  # the wall clock outrunning the monotonic one by more than this is a suspend or a clock step


def clock_jump(wall_elapsed: float, monotonic_elapsed: float) -> float:
    """How far the wall clock jumped between two loop turns: a suspended machine (the monotonic clock stands still
    while it sleeps, on Linux and macOS) or a clock stepped by hand or NTP; 0 for the drift of a normal turn."""
    jump = wall_elapsed - monotonic_elapsed
    return jump if abs(jump) > CLOCK_JUMP_SECONDS else 0.0


def discount_clock_jump(rank0: Rank0Progress | None, jump: float) -> Rank0Progress | None:
    """Rank 0's reading with the stall clock moved on by `jump`: the trainer was frozen with the machine, so a
    sleep longer than stallTimeoutSeconds restarted a healthy gang as Stalled, spending runPolicy.backoffLimit."""
    return replace(rank0, changed_at=rank0.changed_at + jump) if rank0 is not None and jump else rank0
SCRAPE_TIMEOUT_SECONDS = 1.0
EXIT_INTERRUPTED = 130
EXIT_CANNOT_RUN = 3  # this machine could not run it (run directory locked or unwritable, a port taken): kuberl.cli's table
REASON_CANNOT_RUN_HERE = "CannotRunHere"  # status.json's record of a run the runner stopped with EXIT_CANNOT_RUN


# --- the job file and --set ---------------------------------------------------


class BadOverride(InvalidJob):
    """A `--set` that names no field of the spec: the flag is wrong, not the file."""


def set_path(key: str) -> str:
    """A `--set` key as a path from the document's root."""
    return key if key.startswith(("spec.", "metadata.")) else f"spec.{key}"


def _model_of(annotation: object) -> type[BaseModel] | None:
    """The spec model a field holds (also when optional), or None for a value or a free-form map."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _fields(model: type[BaseModel]) -> dict[str, object]:
    return {(field.alias or name): field.annotation for name, field in model.model_fields.items()}


def spec_paths(model: type[BaseModel] = JobSpec, prefix: str = "") -> list[str]:
    """Every field path of the spec model (camelCase, dotted), blocks and leaves."""
    paths = []
    for alias, annotation in _fields(model).items():
        paths.append(prefix + alias)
        inner = _model_of(annotation)
        if inner is not None:
            paths += spec_paths(inner, f"{prefix}{alias}.")
    return paths


# Stable-Baselines3's and CleanRL's names for a field whose kuberl name is another word, as _leaf() writes them;
# a name that differs only in case and underscores (ent_coef, num_envs, learning_starts) needs no row.
HABIT_NAMES = {
    "lr": "learningrate", "nenvs": "numenvs", "envid": "id", "gymid": "id", "nsteps": "numsteps", "nepochs": "updateepochs",
    "cliprange": "clipcoef", "trainfreq": "trainfrequency", "targetnetworkfrequency": "targetupdateinterval",
    "starte": "explorationinitialeps", "ende": "explorationfinaleps",
}


def _leaf(name: str) -> str:
    """A field's last name compared as a habit writes it: case, `_` and `-` aside (ent_coef and entCoef)."""
    leaf = name.rsplit(".", 1)[-1].replace("_", "").replace("-", "").lower()
    return HABIT_NAMES.get(leaf, leaf)


def override_problem(setting: str, key: str, algorithm: str | None = None) -> Problem | None:
    """Why `--set key=…` names no field of the spec (None when it does, or reaches into a free-form map
    such as env.kwargs, which the spec does not type), with the paths it may have meant."""
    path = set_path(key)
    if not path.startswith("spec."):
        return None
    model: type[BaseModel] | None = JobSpec
    parts = path.split(".")[1:]
    for i, part in enumerate(parts):
        fields = _fields(model)
        if part not in fields:
            wanted = ".".join(parts)
            every = spec_paths()
            # a block of the other algorithm is refused for this job (a CEL rule): not a path to suggest
            others = {block for name, (block, _) in ALGORITHM_BLOCKS.items() if algorithm in ALGORITHM_BLOCKS and name != algorithm}
            own = [p for p in every if p.split(".", 1)[0] not in others]
            same_leaf = [p for p in own if _leaf(p) == _leaf(part) and p != wanted]
            # the closest among this job's own paths first: with three off-policy blocks, the other algorithms'
            # batchSize filled all three places for a PPO job's ppo.batch_size
            close = same_leaf or difflib.get_close_matches(wanted, own, n=3, cutoff=0.6) or difflib.get_close_matches(wanted, every, n=3, cutoff=0.6)
            if not close and i + 1 < len(parts):  # env.kwarg.max_episode_steps: the misspelt part, the rest kept
                rest = ".".join(parts[i + 1:])
                close = [f"{c}.{rest}" for c in difflib.get_close_matches(".".join(parts[:i + 1]), every, n=3, cutoff=0.6)]
            close = [c for c in close if c.split(".", 1)[0] not in others] or close
            hint = f"; did you mean {' or '.join(f'--set {c}=…' for c in close)}?" if close else " (docs/spec-reference.md lists every field)"
            return Problem(f"--set {setting}", f"the spec has no field {'.'.join(parts[:i + 1])}{hint}")
        model = _model_of(fields[part])
        if model is None:
            return None  # a value, or a map whose keys are the user's
    return None


def setting_shape_problem(setting: str) -> str | None:
    """Why a `--set` is not KEY=VALUE at all (no `=`; `=3`, `ppo..x=1`, `ppo.=1`: no field has an empty name),
    said the same by the CLI (a usage error, exit 2) and by `check_overrides`; None when it has that shape."""
    key, sep, _ = setting.partition("=")
    if not sep or "" in key.split("."):
        return f"expected --set KEY=VALUE, e.g. --set ppo.learningRate=0.001 (got {setting!r})"
    # Helm's --set takes containers[0].env[0].name; here it was a key "containers[0]" that the API server drops
    if indexed := re.search(r"^(.*?[^.\[\]]+)\[\d*\]", key):
        return (f"a list item is not set by its index here, as Helm's --set does: set the whole list as a YAML value,"
                f" --set '{indexed.group(1)}=[…]', each item whole (got {setting!r})")
    return None


def check_overrides(settings: list[str], algorithm: str | None = None) -> None:
    """Each `--set` is path=value and its path names a spec field (or a key in a map the spec leaves to the
    user, such as env.kwargs); else a BadOverride naming the flag and the paths it may have meant."""
    for setting in settings:
        if (wrong := setting_shape_problem(setting)) is not None:  # the CLI refuses it first, as a usage error
            raise BadOverride([Problem(f"--set {setting}", wrong)])
        key = setting.partition("=")[0]
        if (problem := override_problem(setting, key, algorithm)) is not None:
            raise BadOverride([problem])


def apply_overrides(job: Mapping, workers: int | None, settings: list[str]) -> dict:
    """A copy of the job with `--workers` and each `--set path=value` applied;
    paths are the YAML's (camelCase), relative to `spec` unless they start
    with `spec.` or `metadata.`; values are YAML (`check_overrides` checks the paths)."""
    out = copy.deepcopy(dict(job))
    pairs = [("spec.workers", workers)] if workers is not None else []
    for setting in settings:
        if (wrong := setting_shape_problem(setting)) is not None:
            raise BadOverride([Problem(f"--set {setting}", wrong)])
        key, _, raw = setting.partition("=")
        path = set_path(key)
        pairs.append((path, override_value(setting, raw)))
    for path, value in pairs:
        node = out
        parts = path.split(".")
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[parts[-1]] = value
    return out


def override_value(setting: str, raw: str) -> object:
    """`--set`'s value read as the job file is (bounded, plain YAML: no tags, no alias bomb); one that
    cannot be read is a BadOverride naming the flag (the file is not at fault), not a traceback."""
    if not raw:
        return ""
    try:
        values = load_documents(raw)
    except UnreadableSpec as e:
        raise BadOverride([Problem(f"--set {setting}", f"the value is not plain YAML: {e}")]) from None
    if len(values) > 1:
        raise BadOverride([Problem(f"--set {setting}", "expected one YAML value (got several documents)")])
    return values[0] if values else None


# --- addresses and cluster DNS ------------------------------------------------


def pod_address(run_dir: str, rank: int) -> str:
    """Pod `rank`'s 127.x.y.z: a block per run directory, so two runs side by
    side never share an address (127.0.0.1 stays the host's)."""
    digest = int.from_bytes(hashlib.sha256(os.path.abspath(run_dir).encode()).digest()[:4], "big")
    base = (127 << 24) | ((1 + digest % 254) << 16) | (((digest >> 8) % 240) << 8)
    return str(ipaddress.IPv4Address(base + 2 + rank))


@dataclass(frozen=True)
class DNSPod:
    pod: Mapping
    ip: str
    ready: bool = False


def dns_records(services: list[Mapping], pods: list[DNSPod], cluster_domain: str = CLUSTER_DOMAIN) -> dict[str, list[str]]:
    """A records by Kubernetes' DNS rules: a headless Service `s` in namespace
    `ns` serves `s.ns.svc.<domain>` (every endpoint) and, for each selected pod
    whose spec.subdomain is `s` and that has a spec.hostname `h`,
    `h.s.ns.svc.<domain>`. Endpoints are the selected pods that are ready, or
    all of them when the Service publishes not-ready addresses."""
    records: dict[str, list[str]] = {}
    for service in services:
        meta, spec = service["metadata"], service.get("spec") or {}
        namespace = meta.get("namespace", NAMESPACE)
        selector = spec.get("selector") or {}
        if spec.get("clusterIP") != "None" or not selector:
            continue  # only headless Services with a selector name pods
        zone = f"{meta['name']}.{namespace}.svc.{cluster_domain}"
        for entry in pods:
            pod_meta, pod_spec = entry.pod["metadata"], entry.pod.get("spec") or {}
            labels = pod_meta.get("labels") or {}
            if pod_meta.get("namespace", NAMESPACE) != namespace or any(labels.get(k) != v for k, v in selector.items()):
                continue
            if not (entry.ready or spec.get("publishNotReadyAddresses")):
                continue
            records.setdefault(zone, []).append(entry.ip)
            if pod_spec.get("hostname") and pod_spec.get("subdomain") == meta["name"]:
                records.setdefault(f"{pod_spec['hostname']}.{zone}", []).append(entry.ip)
    return records


def resolve(name: str, records: Mapping[str, list[str]], namespace: str = NAMESPACE, cluster_domain: str = CLUSTER_DOMAIN) -> str | None:
    """What a pod in `namespace` gets for `name` (resolv.conf search list
    `<ns>.svc.<domain> svc.<domain> <domain>`, ndots 5): one address, or None."""
    name = name.rstrip(".")
    search = [f"{namespace}.svc.{cluster_domain}", f"svc.{cluster_domain}", cluster_domain]
    candidates = [f"{name}.{s}" for s in search] + [name] if name.count(".") < 5 else [name]
    for candidate in candidates:
        if records.get(candidate):
            return records[candidate][0]
    return None


def explain_unresolved(name: str, services: list[Mapping], pods: list[DNSPod]) -> str:
    """Why a pod's name does not resolve, in the terms of the rule it breaks."""
    host = name.split(".")[0]
    owner = next((p for p in pods if (p.pod.get("spec") or {}).get("hostname") == host), None)
    if owner is None:
        return f"no pod has spec.hostname {host!r}"
    subdomain = owner.pod["spec"].get("subdomain")
    service = next((s for s in services if s["metadata"]["name"] == subdomain), None)
    if service is None:
        return f"pod {owner.pod['metadata']['name']!r} has spec.subdomain {subdomain!r}, but no Service has that name"
    spec = service.get("spec") or {}
    labels = owner.pod["metadata"].get("labels") or {}
    if spec.get("clusterIP") != "None":
        return f"Service {subdomain!r} is not headless (clusterIP: None)"
    if any(labels.get(k) != v for k, v in (spec.get("selector") or {}).items()):
        return f"Service {subdomain!r}'s selector {spec.get('selector')} does not select pod {owner.pod['metadata']['name']!r}"
    if not spec.get("publishNotReadyAddresses"):
        return f"Service {subdomain!r} does not publish not-ready addresses, and rendezvous happens before any pod is ready"
    return f"the name does not match {host}.{subdomain}.<namespace>.svc"


def make_resolver(services: list[Mapping], pods: list[DNSPod], namespace: str = NAMESPACE) -> Callable[[str], str]:
    """A pod's view of cluster DNS; a name that would not resolve in a cluster is an error here."""
    records = dns_records(services, pods)

    def resolver(name: str) -> str:
        address = resolve(name, records, namespace)
        if address is None:
            raise LocalRunError(f"{name} does not resolve by the cluster's DNS rules: {explain_unresolved(name, services, pods)}")
        return address

    return resolver


# --- rank 0's metrics -----------------------------------------------------------


def scrape(address: str, port: int, job: str) -> Rank0Reading | None:
    """Short timeout: a stopped rank 0 freezes its metrics server too. The one parser, bounded."""
    try:
        with urllib.request.urlopen(f"http://{address}:{port}/metrics", timeout=SCRAPE_TIMEOUT_SECONDS) as reply:
            return rank0metrics.parse(reply.read(rank0metrics.MAX_PAGE_BYTES + 1), job)
    except (OSError, ValueError):
        return None


# --- the local cluster ----------------------------------------------------------


@dataclass
class LocalPod:
    pod: dict
    ip: str
    rank: int
    generation: int
    process: PodProcess
    deletion_timestamp: float | None = None
    grace_seconds: float = 0.0  # what its deletion gave it


class LocalCluster:
    """The job's Service, ConfigMap, claim and pods, on this machine."""

    def __init__(self, job: Job, uid: str, run_dir: str, out=None, configmaps: Mapping[str, Mapping[str, str]] | None = None):
        self.job, self.uid, self.run_dir = job, uid, run_dir
        self.out = out or sys.stdout
        self.services = [render_service(job, NAMESPACE)]
        configmap = render_configmap(job, NAMESPACE, uid)
        if configmap["metadata"]["name"] in (configmaps or {}):
            raise LocalRunError(f"ConfigMap {configmap['metadata']['name']!r} is the job's own (its frozen configuration): name yours otherwise")
        # each pod's configMap volumes are projected from these into its own sandbox, as a kubelet does
        self.configmaps = {**{k: dict(v) for k, v in (configmaps or {}).items()}, configmap["metadata"]["name"]: dict(configmap["data"])}
        self.pods: dict[str, LocalPod] = {}
        self.roots = make_pod_roots(run_dir)  # the pods' roots, outside the run directory (None: inside it)
        self.gpus = host_gpus()  # each pod's slice of them: pod_gpus

    def claim_dir(self, claim: str) -> str:
        """The job's checkpoint claim is runs/<job>/checkpoints; any other claim is runs/_claims/<claim>, one
        directory for every job run beside this one, as a PVC is one volume for every job of its namespace
        (a second job reading what the first saved to it found it empty). `_` starts no job's name."""
        spec = self.job.spec
        ours = spec.checkpoint.claim_name or names.pvc_name(self.job.name)
        shared = os.path.join(os.path.dirname(self.run_dir), SHARED_CLAIMS_DIR, claim)
        path = os.path.join(self.run_dir, "checkpoints") if claim == ours else shared
        runs = os.path.dirname(self.run_dir)  # made without following a link any run's pods may have left there
        make_dirs(runs, os.path.relpath(path, runs), f"persistentVolumeClaim {claim!r}", f"the runs directory {runs}")
        return path

    def live_dns_pods(self) -> list[DNSPod]:
        return [DNSPod(p.pod, p.ip, p.process.running) for p in self.pods.values() if p.deletion_timestamp is None]

    def prefix(self, rank: int) -> str:
        """What marks a pod's output lines: its rank when it runs one process; with several (ranks
        2 and 3 in worker 1 of a torchrun pod) its worker index, as the job's messages name it."""
        return f"[rank {rank}]" if self.job.spec.procs == 1 else f"[worker {rank}]"

    def create(self, generation: int, ranks: tuple[int, ...]) -> None:
        """Start the pods of `generation`; names resolve against every pod that exists, these included."""
        fresh, written = [], {}
        for rank in ranks:
            if names.pod_name(self.job.name, rank) in self.pods:
                continue  # 409: the name is taken; the lifecycle sees it next round
            rendered = render_pod(self.job, NAMESPACE, self.uid, rank, generation, target="local")
            pod = kubelet_mount_paths(rendered)
            pod["metadata"]["uid"] = str(uuid.uuid4())
            fresh.append(DNSPod(pod, pod_address(self.run_dir, rank)))
            written[pod["metadata"]["name"]] = template_fields(rendered, self.job.spec.template)
        resolver = make_resolver(self.services, self.live_dns_pods() + fresh)
        logs = os.path.join(self.run_dir, "logs")
        make_dirs(self.run_dir, "logs", "the run's logs", f"the run's directory {self.run_dir}")
        for entry in fresh:
            name, rank = entry.pod["metadata"]["name"], int(entry.pod["metadata"]["labels"][names.LABEL_RANK])
            base_env = container_base_env()
            gpus = pod_gpus(self.gpus, rank, self.job.spec.gpus_per_worker)
            if gpus is not None:
                base_env["CUDA_VISIBLE_DEVICES"] = gpus
            try:
                process = start_pod(
                    entry.pod, entry.ip, os.path.join(self.run_dir, "pods", name), self.configmaps,
                    self.claim_dir, resolver, prefix=self.prefix(rank), out=self.out,
                    log_path=os.path.join(logs, f"{name}-g{generation}.log"), base_env=base_env, roots=self.roots,
                )
            except LocalRunError as e:  # said at the field the user wrote: the pod's volumeMounts[4] is their [0]
                raise LocalRunError(at_template_fields(str(e), written[name])) from None
            self.pods[name] = LocalPod(entry.pod, entry.ip, rank, generation, process)

    def delete(self, pod_names: tuple[str, ...], force: bool, now: float) -> None:
        for name in pod_names:
            entry = self.pods.get(name)
            if entry is None:
                continue
            if not entry.process.running:
                del self.pods[name]
                continue
            grace = 0 if force else entry.pod["spec"].get("terminationGracePeriodSeconds", 30)
            entry.grace_seconds = grace if entry.deletion_timestamp is None else min(grace, entry.grace_seconds)
            entry.deletion_timestamp = entry.process.terminate(grace, now)

    def observe(self, now: float) -> list[ObservedPod]:
        """Every pod as a cluster would report it; deleted pods whose process ended are gone."""
        seen = []
        for name, entry in list(self.pods.items()):
            code = entry.process.poll(now)
            if entry.deletion_timestamp is not None and code is not None:
                if entry.process.killed_at_grace and entry.grace_seconds > 0:  # a kubelet's kill says nothing; this does
                    say(f"{name} (worker {entry.rank}) was still running {entry.grace_seconds:g}s after its SIGTERM "
                        "(spec.runPolicy.terminationGracePeriodSeconds): killed, so what it had not saved is lost"
                        + (", its stop's checkpoint among it (the next run says what it resumes from)" if entry.rank == 0 else ""))
                del self.pods[name]
                continue
            seen.append(observed(entry, code))
        return seen

    def running(self) -> list[PodProcess]:
        return [p.process for p in self.pods.values() if p.process.running]

    def remove_roots(self) -> None:
        """The pods' roots once none runs (each ended pod's mounts are down already), as a node removes an ended
        container's own files: outside the run directory, in this user's runtime directory, nothing of them is kept."""
        if self.roots is not None and not self.running():
            remove_tree(self.roots)

    def kill_all(self) -> None:
        for entry in self.pods.values():
            entry.process.kill()
        for entry in self.pods.values():
            entry.process.wait(5)


def observed(entry: LocalPod, code: int | None) -> ObservedPod:
    """The pod as a kubelet would report it, read by the operator's own
    `lifecycle.observed_pod`: reasons only from what the container states."""
    process = entry.process
    if code is None:
        phase, state = "Running", {"running": {}}
    else:
        phase = "Succeeded" if code == 0 else "Failed"
        kubelet_reason = "Completed" if code == 0 else ("StartError" if process.start_error else "Error")
        state = {"terminated": {"exitCode": code, "reason": kubelet_reason, "message": process.termination_message() or ""}}
    pod = {
        "metadata": {"name": entry.pod["metadata"]["name"], "labels": entry.pod["metadata"]["labels"]},
        "status": {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "True" if code is None else "False"}],
            "containerStatuses": [{"name": names.TRAINER_CONTAINER, "state": state}],
        },
    }
    return replace(lifecycle.observed_pod(pod), deletion_timestamp=entry.deletion_timestamp, start_time=process.started_at,
                   finished_at=None if code is None else process.finished_at)


# --- the run --------------------------------------------------------------------


def read_configmap(doc: dict, path: str) -> tuple[str, dict[str, str]]:
    """A ConfigMap document's name and data, checked as the API server checks them (`podsource.configmap_problems`)."""
    problems = podsource.configmap_problems(doc)
    if doc.get("binaryData"):  # dropping it would leave its files missing from the volume without a word
        problems.append(Problem("binaryData", "not served by kuberl run; put its files in data"))
    metadata = doc.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if problems:
        raise SystemExit(f"{path}: ConfigMap {name!r} is invalid ({len(problems)} problem(s)):\n"
                         + "\n".join(f"  {p}" for p in problems))
    return name, podsource.configmap_data(doc)


def _namespace(doc: dict) -> str | None:
    metadata = doc.get("metadata")
    namespace = metadata.get("namespace") if isinstance(metadata, dict) else None
    return namespace if isinstance(namespace, str) and namespace else None


def split_documents(docs: list, path: str) -> tuple[dict, dict[str, dict[str, str]]]:
    """The job and the ConfigMaps beside it (as `kubectl apply -f` takes a file
    of both): its template's envFrom, configMapKeyRef and configMap volumes read them here."""
    jobs = [d for d in docs if not podsource.is_configmap(d)]
    if len(jobs) == 1 and not isinstance(jobs[0], dict):  # a list or a scalar where the job goes: say what came
        raise SystemExit(f"{path}: expected an RLTrainingJob, a YAML mapping (got {shown_value(jobs[0])})")
    if len(jobs) != 1:
        raise SystemExit(f"{path}: expected exactly one RLTrainingJob document (and any ConfigMaps it reads)")
    configmaps: dict[str, dict[str, str]] = {}
    for doc in docs:
        if doc is jobs[0]:
            continue
        name, data = read_configmap(doc, path)
        if name in configmaps:
            raise SystemExit(f"{path}: two ConfigMaps named {name!r}")
        ours, theirs = _namespace(jobs[0]), _namespace(doc)
        if ours and theirs and ours != theirs:  # a pod reads ConfigMaps of its own namespace only
            raise SystemExit(f"{path}: ConfigMap {name!r} has metadata.namespace {theirs!r}, the job {ours!r}: the job's"
                             " pods could not read it in a cluster; put both in one namespace")
        configmaps[name] = data
    return jobs[0], configmaps


def job_uid(run_dir: str) -> str:
    """The same run directory is the same job: resuming keeps the uid (and checkpoints). Read and written without
    following a link: a run directory is anyone's to write, and a dangling link at uid had the new uid written
    wherever it pointed."""
    path = os.path.join(run_dir, "uid")
    if os.path.lexists(path):
        text = read_regular_file(path, 100)
        if text is None:
            raise LocalRunError(f"{path} is a link or no regular file, not the uid kuberl run wrote: delete it, or the run"
                                " directory, to start the job afresh")
        try:
            return str(uuid.UUID(text.strip()))
        except ValueError:
            raise LocalRunError(f"{path} holds {text.strip()!r}, not the uid kuberl run wrote: delete it, or the run directory,"
                                " to start the job afresh") from None
    uid = str(uuid.uuid4())
    with open_to_write(path) as f:
        f.write(uid + "\n")
    return uid


def last_status(text: str, path: str) -> dict:
    """The last run's status.json, which a resumed run counts its generation on from; one a hand
    or a full disk damaged is refused, saying what to do, rather than a traceback."""
    try:
        status = json.loads(text)
        generation = status.get("generation", 0)
    except (ValueError, AttributeError, RecursionError):  # 1 MiB of "[" nests deeper than json decodes
        status = generation = None
    if not isinstance(status, dict) or not isinstance(generation, int) or isinstance(generation, bool) or generation < 0:
        raise LocalRunError(f"{path} is not a status kuberl run wrote: delete it to start the job again from generation 0"
                            " (its checkpoints are kept, so training resumes from the last one)")
    return status


def write_json(path: str, data: dict) -> None:
    tmp = f"{path}.tmp"
    with contextlib.suppress(FileNotFoundError):  # a leftover (or a link left in its place) is replaced, never written through
        os.unlink(tmp)
    with open_to_write(tmp) as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


def port_free(port: int) -> bool:
    """A port taken on any address here (another run's store, a custom torchrun's on every address) is taken for
    rank 0's store too, on its own 127.x."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def check_port_free(port: int) -> None:
    if not port_free(port):
        raise LocalRunError(f"rendezvous port {port} is in use here; pick another with --set rendezvous.port=N")


def rendezvous_port_lost(cluster: LocalCluster, spec: JobSpec) -> bool:
    """Whether a process outside the run holds the rendezvous port: rank 0, which alone listens on it, has ended
    (and with it everything it started), yet the port is not free. Another user's run (reservations are per user,
    reserve_port) or any program that bound it after the start's check took it; rank 0 failed EADDRINUSE."""
    if not meets_at_master_port(spec):
        return False
    rank0 = [p for p in cluster.pods.values() if p.rank == 0]
    return bool(rank0) and not any(p.process.running for p in rank0) and not port_free(spec.rendezvous.port)


def meets_at_master_port(spec: JobSpec) -> bool:
    """Whether rank 0 listens on MASTER_PORT: kuberl's trainer alone (world size 1) forms no process group,
    but a command of the user's may (init_process_group in one pod, torchrun's static store), and this
    machine's ports are every pod's: a port taken here failed it 'EADDRINUSE', as no pod's own is in a cluster."""
    return spec.world_size > 1 or spec.trainer == "custom"


def port_reservations() -> str | None:
    """This user's directory of rendezvous port reservations (one lock file per port), made private; None where none
    can be kept (a directory of that name another user made first, in a shared /tmp): runs are not coordinated then."""
    directory = os.path.join(runtime_dir(), f"kuberl-{os.getuid()}-ports")
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(directory, 0o700)
        info = os.lstat(directory)
    except OSError:
        return None
    return directory if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() else None


def reserve_port(port: int, held: contextlib.ExitStack) -> str | None:
    """Reserve `port` among the kuberl runs of this machine's user for as long as `held` lasts (a lock on a file: it
    goes with the process, however it ends). None when reserved (or when runs cannot be coordinated here); else the
    pid of the run that holds it. Checking that a port is free does not take it: two runs started together both
    found the default free before either's rank 0 bound it, and the second's failed on it (EADDRINUSE)."""
    directory = port_reservations()
    if directory is None:
        return None
    try:
        fd = os.open(os.path.join(directory, str(port)), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        return holder
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    held.callback(os.close, fd)
    return None


def with_free_rendezvous_port(document: dict, spec: JobSpec, held: contextlib.ExitStack) -> dict:
    """The default rendezvous port taken (another local run): use the next free one, reserved among kuberl runs
    here for as long as `held` lasts (reserve_port). A port the user chose is kept, and refused if another kuberl
    run holds it (one bound by anything else is refused when the run starts: check_port_free)."""
    chosen = "port" in ((document.get("spec") or {}).get("rendezvous") or {})
    if not meets_at_master_port(spec):
        return document
    if chosen:
        holder = reserve_port(spec.rendezvous.port, held)
        if holder is not None:
            raise LocalRunError(f"rendezvous port {spec.rendezvous.port} is taken by another kuberl run here (pid {holder});"
                                " pick another with --set rendezvous.port=N")
        return document
    metrics_ports = range(spec.metrics.port, spec.metrics.port + 16)
    for port in range(spec.rendezvous.port, spec.rendezvous.port + 100):
        if port != spec.rendezvous.port and port in metrics_ports:
            continue
        with contextlib.ExitStack() as attempt:
            if reserve_port(port, attempt) is not None or not port_free(port):
                continue
            held.enter_context(attempt.pop_all())
        if port == spec.rendezvous.port:
            return document
        say(f"rendezvous port {spec.rendezvous.port} is taken here: using {port} (--set rendezvous.port=N to choose)")
        return apply_overrides(document, None, [f"rendezvous.port={port}"])
    return document


def wait_for_leftovers(sandboxes: str, grace_seconds: float) -> None:
    """Two generations never run at once, across runners too: processes of a
    runner that died got SIGTERM with it; give them their grace period, then kill."""
    deadline = time.time() + grace_seconds
    leftovers = processes_under(sandboxes)
    if leftovers:
        say(f"waiting up to {grace_seconds:g}s for {len(leftovers)} process(es) of an earlier run to exit")
    while leftovers and time.time() < deadline:
        time.sleep(POLL_SECONDS)
        leftovers = processes_under(sandboxes)
    for pid in leftovers:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def suspended(spec: JobSpec) -> JobSpec:
    return spec.model_copy(update={"run_policy": spec.run_policy.model_copy(update={"suspend": True})})


class Interrupts:
    """First Ctrl-C (or SIGTERM, or SIGHUP: the terminal closed, an ssh session dropped): stop gracefully,
    every rank saving. Second: kill at once."""

    def __init__(self) -> None:
        self.count = 0

    def __enter__(self) -> Self:
        self.previous = {s: signal.signal(s, self.handle) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        return self

    def handle(self, _signum: int, _frame: object) -> None:
        self.count += 1

    def __exit__(self, *_exc: object) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)


def say(message: str) -> None:
    """A line of kuberl's own; what it quotes of a pod arrives with each further line marked
    `[worker N]` (lifecycle), of a spec as one line (safetext)."""
    line = f"[kuberl] {safetext.escape(message)}"
    if CONSOLE is not None:  # a live progress bar: the line goes above it
        CONSOLE.line(line)
    else:
        print(line, file=OUTPUT or sys.stdout, flush=True)


CONSOLE: Console | None = None  # the run's console while `kuberl run` drives a job (_run_held)
OUTPUT: Output | None = None  # `kuberl run`'s stdout, which its reader may close (cmd_run)


@contextlib.contextmanager
def run_lock(run_dir: str) -> Iterator[None]:
    """One runner per run directory, as one job object has one controller: a second `kuberl run` of the
    same job (another terminal) killed the first's ranks as leftovers and then raced it for the same pod
    directories. The lock goes with the process, however it ends."""
    path = os.path.join(run_dir, "lock")
    try:  # never through a link: a run directory is anyone's to write, and one at lock had the file it named truncated
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
        fd = None
    if fd is None or not stat.S_ISREG(os.fstat(fd).st_mode):
        if fd is not None:
            os.close(fd)
        raise LocalRunError(f"{shown(path)} is a link or no regular file, not the lock kuberl run keeps there: delete it"
                            " and run again")
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            raise LocalRunError(f"another kuberl run (pid {holder}) is running this job in {shown(run_dir)}: wait for it,"
                                " or stop it (Ctrl-C there) and run again to resume") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


def run(job: Job, run_dir: str, out=None, configmaps: Mapping[str, Mapping[str, str]] | None = None) -> tuple[int, dict, float]:
    """Drive the job to an end; returns (exit code, final status, wall seconds)."""
    with run_lock(run_dir):
        return _run(job, run_dir, out, configmaps)


def _run(job: Job, run_dir: str, out=None, configmaps: Mapping[str, Mapping[str, str]] | None = None,
         absent_scripts: Sequence[str] = ()) -> tuple[int, dict, float]:
    """Observe, decide (lifecycle.decide), act, until the job ends. `absent_scripts`: image_scripts' paths,
    already warned of: a restart after one of them was not found would fail alike, so the run stops instead."""
    uid = job_uid(run_dir)
    status_path = os.path.join(run_dir, "status.json")
    status: dict = {}
    if os.path.lexists(status_path):  # a file put in its place (a FIFO, gigabytes) is not read through, nor whole
        previous = last_status(read_regular_file(status_path, RECORD_LIMIT) or "", status_path)
        # a suspend (Ctrl-C) recorded the next generation already, and no pod ran it: the rerun is that generation,
        # as a cluster's resume is. Any other ending (a killed runner, a failure) leaves the generation that ran, and
        # seeds follow the generation: the rerun takes the next, so no two gangs that ran share their seeds
        status = {"generation": previous.get("generation", 0) + (previous.get("phase") != "Suspended")}
        paths = paths_of(job, run_dir, uid)
        checkpoints = paths["checkpoints"]
        saved_any = None if paths["model"] is None else (  # a custom trainer's checkpoints are its own
            os.path.isdir(checkpoints) and newest_on_disk(checkpoints) is not None)
        whole, flawed = newest_whole(checkpoints) if saved_any else (None, [])
        say(rerun_note(job.name, previous.get("phase"), newest_checkpoint(checkpoints, whole) if whole else None, saved_any,
                       whole, flawed, reason=failed_reason(previous)))
    for sandboxes in (pod_roots_dir(run_dir), os.path.join(run_dir, "pods")):  # the roots of this kuberl's pods, an older one's
        wait_for_leftovers(sandboxes, job.spec.run_policy.termination_grace_period_seconds)
    if meets_at_master_port(job.spec):
        check_port_free(job.spec.rendezvous.port)
    cluster = LocalCluster(job, uid, run_dir, out, configmaps)
    started = time.time()
    rank0: Rank0Progress | None = None
    last_scrape = 0.0
    killed = announced = False
    last_turn = (time.time(), time.monotonic())
    with Interrupts() as interrupts:
        try:
            while True:
                now, ticking = time.time(), time.monotonic()
                jump = clock_jump(now - last_turn[0], ticking - last_turn[1])
                last_turn = (now, ticking)
                if jump:
                    rank0 = discount_clock_jump(rank0, jump)
                    say(f"the wall clock jumped {jump:+.0f}s (this machine slept, or its clock was set): rank 0's stall"
                        " clock does not count it")
                pods = cluster.observe(now)
                leader = next((p for p in cluster.pods.values() if p.rank == 0 and p.deletion_timestamp is None), None)
                if leader is not None and leader.process.running and now - last_scrape >= SCRAPE_EVERY_SECONDS:
                    last_scrape = now
                    reading = scrape(leader.ip, job.spec.metrics.port, job.name)
                    if reading is not None:
                        rank0 = rank0metrics.progress_of(rank0, leader.generation, reading, now)
                        if isinstance(cluster.out, Console):
                            cluster.out.progress(reading.timesteps, reading.episode_return_mean, reading.eval_return)
                if getattr(cluster.out, "reader_gone", False) and not interrupts.count:  # `| head` has read enough
                    interrupts.count = 1
                    say("the output's reader is gone (a pipe closed): stopping as on Ctrl-C")
                if interrupts.count and not announced:
                    announced = True
                    say(f"stopping: SIGTERM to every rank, {job.spec.run_policy.termination_grace_period_seconds}s to save (Ctrl-C again to kill)")
                spec = suspended(job.spec) if interrupts.count else job.spec
                decision = lifecycle.decide(spec, status, pods, rank0, now)
                restarts = [a.message for a in decision.actions
                            if isinstance(a, lifecycle.Event) and a.reason == lifecycle.REASON_GANG_RESTART]
                if restarts and rendezvous_port_lost(cluster, job.spec):  # before the restart is recorded: none happens
                    raise LocalRunError(f"rendezvous port {job.spec.rendezvous.port} is taken here: something else bound it"
                                        " after this run found it free, and holds it now that rank 0 has ended, so every"
                                        " restart would fail alike: stopped instead of spending runPolicy.backoffLimit;"
                                        " pick another with --set rendezvous.port=N")
                if decision.status != status:
                    write_json(status_path, decision.status)
                status = decision.status
                act(cluster, decision, now, interrupted=bool(interrupts.count))
                missing = next(filter(None, (missing_script_failure(m, list(absent_scripts)) for m in restarts)), None)
                if missing is not None:
                    raise LocalRunError(f"{missing!r} is not on this machine (warned above), so every restart would fail"
                                        " alike: stopped instead of spending runPolicy.backoffLimit. Mount a volume at its"
                                        " directory (a hostPath to your checkout), or run it in a cluster whose image has it")
                if interrupts.count > 1 and not killed:
                    say("killing every rank now")
                    cluster.kill_all()
                    killed = True
                if decision.phase in lifecycle.TERMINAL and not cluster.running():
                    return (0 if decision.phase == lifecycle.SUCCEEDED else 1), status, time.time() - started
                if decision.phase == lifecycle.SUSPENDED and interrupts.count and not cluster.pods:
                    return EXIT_INTERRUPTED, status, time.time() - started
                time.sleep(POLL_SECONDS)
        except LocalRunError as e:
            cluster.kill_all()
            write_json(status_path, cannot_run_status(status, str(e), time.time()))
            raise
        except BaseException:
            cluster.kill_all()
            raise
        finally:
            cluster.remove_roots()


def cannot_run_status(status: dict, message: str, now: float) -> dict:
    """The record of a run the runner stopped because this machine cannot run it (EXIT_CANNOT_RUN): Failed, saying
    why. Left as the loop last wrote it (Restarting after an absent script's first failure), the rerun said "last run:
    ended while restarting", as after a runner killed mid-run, and nothing on disk told what had stopped it."""
    at = lifecycle.rfc3339(now)
    conditions = [c for c in status.get("conditions", []) if c.get("type") not in (lifecycle.CONDITION_READY, lifecycle.CONDITION_FAILED)]
    return {**status, "generation": status.get("generation", 0), "phase": lifecycle.FAILED, "completionTime": at,
            "conditions": [*conditions, *({"type": kind, "status": value, "reason": REASON_CANNOT_RUN_HERE,
                                           "message": safetext.one_line(message)[:lifecycle.MESSAGE_LIMIT],
                                           "lastTransitionTime": at}
                                          for kind, value in ((lifecycle.CONDITION_READY, "False"), (lifecycle.CONDITION_FAILED, "True")))]}


def failed_reason(status: Mapping[str, Any]) -> str | None:
    """The reason of a status's true Failed condition (None: none, or not one kuberl run wrote)."""
    conditions = status.get("conditions")
    failed = next((c for c in conditions if isinstance(c, Mapping) and c.get("type") == lifecycle.CONDITION_FAILED
                   and c.get("status") == "True") if isinstance(conditions, list) else (), None)
    reason = failed.get("reason") if failed is not None else None
    return reason if isinstance(reason, str) else None


def reason_and_message(reason: str, message: str) -> str:
    """`reason: message`, the reason once: a worker's message quotes its own termination reason, which read
    "ConfigError: worker 0 (j-0): ConfigError: spec.env.id: …"."""
    return message if f"{reason}: " in message else f"{reason}: {message}"


def act(cluster: LocalCluster, decision: lifecycle.Decision, now: float, interrupted: bool = False) -> None:
    """Carry out the decision (its status is already written), then tell the user. After Ctrl-C the suspension
    is not announced: its pods are still saving, and the run's last line says where it stopped."""
    for action in decision.actions:
        if isinstance(action, lifecycle.DeletePods):
            cluster.delete(action.names, action.force, now)
        elif isinstance(action, lifecycle.CreatePods):
            cluster.create(action.generation, action.ranks)
    for action in decision.actions:
        if not isinstance(action, lifecycle.Event) or (interrupted and action.reason == lifecycle.REASON_SUSPEND):
            continue
        if action.reason == lifecycle.REASON_RANK0_SUCCEEDED:  # rank 0's own last line, just above, says it word
            continue  # for word, and the run's closing line follows: a third copy between them is noise
        say(reason_and_message(action.reason, action.message))


def shown(path: str) -> str:
    """Paths under the current directory read best relative to it."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def rerun_note(name: str, last_phase: object, newest: tuple[str, int] | None, saved_any: bool | None,
               on_disk: str | None = None, flawed: Sequence[tuple[str, str]] = (), reason: str | None = None) -> str:
    """What a rerun of an unfinished run continues from (`saved_any` None: a custom trainer's, which kuberl cannot
    tell). "resuming (last run: Suspended, generation 1)" followed the last run's "before any checkpoint was saved;
    the same command starts over", and named no checkpoint. `on_disk`, the newest whole checkpoint file by name
    (`newest_whole`): a rank stopped between a save and its progress record leaves one newer than progress.jsonl
    names, and the trainer resumes from that one (the newest that loads). `flawed`: (name, why) of the newer files
    the trainer skips for their frame; "resuming ck from ckpt-0000000640.pt" named a truncated file the trainer
    then set aside, resuming from an older one. `reason`: the last run's Failed condition's (REASON_CANNOT_RUN_HERE:
    the runner stopped it, exit 3)."""
    if last_phase == "Suspended":
        last = "stopped"
    elif last_phase == lifecycle.FAILED and reason == REASON_CANNOT_RUN_HERE:
        last = "stopped, as this machine could not run it"
    elif last_phase in ("Pending", "Running", "Restarting"):  # the runner itself ended (killed, the machine rebooted)
        last = f"ended while {last_phase.lower()}"
    else:
        last = last_phase.lower() if isinstance(last_phase, str) else "unknown"
    if saved_any is None:
        return f"running {name} again (last run: {last})"
    skipped = "; ".join(f"{file}: {why}" for file, why in flawed[:3]) + (f"; and {len(flawed) - 3} more" if len(flawed) > 3 else "")
    if on_disk is None and flawed:
        return (f"{name}'s last run ({last}) left no whole checkpoint ({skipped}): the trainer sets them aside and starts "
                "over, or fails NoUsableCheckpoint, as spec.checkpoint.whenNoneUsable says")
    past = (f"; newer {'one is' if len(flawed) == 1 else 'ones are'} not whole ({skipped}): the trainer sets "
            f"{'it' if len(flawed) == 1 else 'them'} aside") if flawed else ""
    if on_disk is not None and (newest is None or on_disk > newest[0]):  # names sort as their update counts
        return f"resuming {name} from its newest {'whole ' if flawed else ''}checkpoint, {on_disk} (last run: {last}){past}"
    if newest is not None:
        return f"resuming {name} from {newest[0]} at {newest[1]:,} timesteps (last run: {last}){past}"
    if saved_any:  # files progress.jsonl does not name: the trainer picks the newest valid one
        return f"resuming {name} from its newest checkpoint (last run: {last})"
    return f"running {name} again from the start: its last run ({last}) saved no checkpoint"


def newest_on_disk(checkpoint_dir: str) -> str | None:
    """The name of the newest checkpoint file (by its update count), loadable or not."""
    try:
        return max((n for n in os.listdir(checkpoint_dir) if contract.CHECKPOINT_NAME.fullmatch(n)), default=None)
    except OSError:
        return None


def newest_whole(checkpoint_dir: str) -> tuple[str | None, list[tuple[str, str]]]:
    """(the newest checkpoint file whose frame holds, by the trainer's own rule (contract.checkpoint_flaw), or None;
    (name, why) of each newer one that does not). A file that cannot be read now is passed over unjudged."""
    try:
        names = sorted((n for n in os.listdir(checkpoint_dir) if contract.CHECKPOINT_NAME.fullmatch(n)), reverse=True)
    except OSError:
        return None, []
    flawed = []
    for name in names:
        try:
            why = contract.checkpoint_flaw(os.path.join(checkpoint_dir, name))
        except OSError:
            continue
        if why is None:
            return name, flawed
        flawed.append((name, why))
    return None, flawed


def newest_checkpoint(checkpoint_dir: str | None, not_after: str | None = None) -> tuple[str, int] | None:
    """(file name, timesteps) of the newest checkpoint progress.jsonl names (the trainer adds a
    record at each save) that is still on disk, and not newer than `not_after` when given, or None."""
    for record in reversed(progress_records(progress_tail(checkpoint_dir).splitlines())):
        name, steps = record.get("checkpoint"), finite_number(record.get("timesteps"))
        if (isinstance(name, str) and steps is not None and os.path.basename(name) == name
                and (not_after is None or name <= not_after) and os.path.isfile(os.path.join(checkpoint_dir, name))):
            return name, int(steps)
    return None


def best_evaluation(records: list[dict]) -> tuple[float, int] | None:
    """(eval return, timesteps) of the evaluation whose weights best-model.pt holds: the last progress.jsonl record the
    trainer marks `best` (each is better than the one before), or None."""
    for record in reversed(records):
        found = (finite_number(record.get("eval_return")), finite_number(record.get("timesteps")))
        if record.get("best") is True and None not in found:
            return found[0], int(found[1])
    return None


def best_note(model: str | None, checkpoint_dir: str | None) -> str:
    """`; best evaluation … (eval 464.0 at 40,000 timesteps; kuberl eval --best plays it)` where the run kept a
    best-model.pt beside its final model, which holds the last weights and is what kuberl eval plays by default."""
    best = os.path.join(os.path.dirname(model), names.BEST_MODEL) if model else None
    found = best_evaluation(progress_records(progress_tail(checkpoint_dir).splitlines())) if best and os.path.isfile(best) else None
    if found is None:
        return ""
    run_dir = os.path.dirname(os.path.dirname(os.path.dirname(best)))  # RUN_DIR/checkpoints/<job>-<uid>/best-model.pt
    return (f" (the last weights); best evaluation {shown(best)} (eval {shown_return(found[0])} at {found[1]:,} timesteps;"
            f" kuberl eval {shown(run_dir)} --best plays it)")


def summary(job: Job, cluster_paths: dict, status: dict, code: int, wall: float) -> str:
    """The one line a user reads at the end."""
    record = last_progress(cluster_paths.get("checkpoints"))
    timesteps = finite_number(record.get("timesteps", (status.get("progress") or {}).get("timesteps", 0))) or 0
    newest = newest_checkpoint(cluster_paths.get("checkpoints"))
    if newest is not None:
        timesteps = max(timesteps, newest[1])
    saved = f" (newest checkpoint {newest[0]} at {newest[1]:,} timesteps)" if newest else ""
    # named as the progress bar and the trainer name them: which return it is, not a bare "final return"
    evaluated, trained = finite_number(record.get("eval_return")), finite_number(record.get("episode_return_mean"))
    final_text = (f"eval return {shown_return(evaluated)}" if evaluated is not None
                  else f"training return {shown_return(trained)}" if trained is not None else "no return yet")
    where = f"checkpoints {shown(cluster_paths['checkpoints'])}"
    if code == 0:
        if cluster_paths["model"] is None:  # a custom trainer: its workers' exit codes are all kuberl knows
            return f"{job.name} succeeded: every worker exited 0 after {wall:.0f}s; restarts {status.get('restarts', 0)}"
        target = job.spec.success.target_return
        below = target is not None and (evaluated is None or evaluated < target)  # "succeeded": the budget was spent
        if below:
            final_text += f" (below success.targetReturn {target:g}: totalTimesteps ran out first)"
        # met: the model is the best's weights; no target: the budget's last weights, beside the best evaluated ones
        best = best_note(cluster_paths["model"], cluster_paths.get("checkpoints")) if below or target is None else ""
        return (f"{job.name} succeeded: {timesteps:,} timesteps in {wall:.0f}s, {final_text}; "
                f"model {shown(cluster_paths['model'])}{best}; {where}; restarts {status.get('restarts', 0)}")
    failed = next((c for c in status.get("conditions", []) if c["type"] == lifecycle.CONDITION_FAILED and c["status"] == "True"), None)
    if code == EXIT_INTERRUPTED:
        if newest is None and cluster_paths["model"] is not None:  # kuberl's trainer saved none: "resume" would be a broken promise
            return (f"{job.name} stopped at {timesteps:,} timesteps after {wall:.0f}s before any checkpoint was saved; "
                    "the same command starts over")
        return (f"{job.name} stopped at {timesteps:,} timesteps after {wall:.0f}s; {where}{saved}; "
                "run the same command again to resume")
    reason = reason_and_message(failed["reason"], failed["message"]) if failed else status.get("phase", "?")
    return f"{job.name} failed after {wall:.0f}s at {timesteps:,} timesteps{saved}: {reason}"


def paths_of(job: Job, run_dir: str, uid: str) -> dict:
    """Host paths of the trainer's checkpoint directory and final model."""
    cluster_config = json.loads(render_configmap(job, NAMESPACE, uid)["data"][names.CONFIG_FILE])
    mount = names.CHECKPOINT_MOUNT_DIR.rstrip("/") + "/"
    local = os.path.join(run_dir, "checkpoints")

    def host(path: str) -> str:
        return os.path.join(local, path[len(mount):]) if path.startswith(mount) else path

    model = cluster_config["paths"]["finalModel"]
    return {"checkpoints": host(cluster_config["paths"]["checkpointDir"]), "model": host(model) if model else None}


# --- which run a rerun continues -------------------------------------------------

@dataclass(frozen=True)
class RunChoice:
    run_dir: str
    note: str | None = None  # what the user should be told about the choice
    succeeded: bool = False  # the run already succeeded with this very spec: nothing to train
    refused: str | None = None  # why --resume cannot continue it: nothing is to be written or started


# What a checkpoint records as trained_as (kuberl_trainer.session.trained_as), as paths of the learned fields: a resume
# whose spec changes one of them meets a trainer that refuses every checkpoint of the run
TRAINED_AS_PATHS = ("algorithm", "env.id", "ppo.normalizeObservation")


def resume_refusal(run_dir: str, changes: list[tuple[str, Any, Any]]) -> str | None:
    """Why `--resume` cannot continue `run_dir` with a spec whose learned fields changed so (None: it can): the
    trainer refuses a checkpoint trained on another env or algorithm, or with observation normalisation switched,
    and with checkpoint.whenNoneUsable: Fail the run fails once its pods start, its job.yaml already rewritten."""
    meaning = [(path, a, b) for path, a, b in changes if path in TRAINED_AS_PATHS]
    if not meaning or not glob.glob(os.path.join(glob.escape(run_dir), "checkpoints", "*", "ckpt-*.pt")):
        return None
    path, was, now = meaning[0]
    return (f"--resume cannot continue {shown(run_dir)}: its checkpoints were trained with {path} {json.dumps(was)},"
            f" and the trainer refuses them for {json.dumps(now)} (a checkpoint trained on another env or algorithm,"
            " or with observation normalisation switched, is never resumed). Run without --resume to start a fresh"
            " run beside it, or add --set checkpoint.whenNoneUsable=StartOver to train this one from zero (its"
            " checkpoints moved into unreadable/)")


def has_run(run_dir: str) -> bool:
    return any(os.path.exists(os.path.join(run_dir, f)) for f in (FINGERPRINT_FILE, "status.json"))


def run_phase(run_dir: str) -> str | None:
    text = read_regular_file(os.path.join(run_dir, "status.json"), RECORD_LIMIT)
    with contextlib.suppress(ValueError, AttributeError, TypeError, RecursionError):
        return json.loads(text).get("phase") if text else None
    return None


def choose_run(base: str, name: str, learned: dict, resume: bool = False, start_over: bool = False) -> RunChoice:
    """Where this run of job `name` lives. The run of the same learned fields (`kuberl.core.fingerprint`)
    resumes, or, when it already succeeded, is not trained again. A spec that learns something else
    starts a fresh run beside the others (runs/<job>.<fingerprint>: a dot is in no job's name), and
    says which fields changed; `resume` continues the job's latest run whatever changed."""
    primary = os.path.abspath(os.path.join(base, name))
    wanted = fingerprint.fingerprint(learned)
    try:
        entries = os.listdir(base)
    except (FileNotFoundError, NotADirectoryError):
        entries = []
    siblings = sorted(os.path.join(os.path.abspath(base), entry) for entry in entries
                      if entry.startswith(name + ".") and not entry[len(name) + 1:].strip("0123456789abcdef"))
    runs = [d for d in [primary, *siblings] if has_run(d)]
    if not runs:
        return RunChoice(primary)
    recorded = {d: recorded_learned_values(d) for d in runs}
    same = next((d for d in runs if recorded[d] is not None and fingerprint.fingerprint(recorded[d]) == wanted), None)
    if same is not None:
        succeeded = run_phase(same) == lifecycle.SUCCEEDED
        return RunChoice(same, succeeded=succeeded)
    latest = max(runs, key=lambda d: os.path.getmtime(os.path.join(d, "status.json")) if os.path.exists(os.path.join(d, "status.json")) else 0)
    old = recorded[latest]
    changes = fingerprint.describe_changes(fingerprint.changed_fields(old, learned)) if old is not None else "its spec was not recorded"
    if resume and old is not None and not start_over and (refused := resume_refusal(latest, fingerprint.changed_fields(old, learned))):
        return RunChoice(latest, refused=refused)
    if resume:
        return RunChoice(latest, note=f"resuming {shown(latest)} although what it learns changed (--resume): {changes}")
    fresh = f"{primary}.{wanted[:8]}"
    if fresh in runs:  # a prefix shared with another spec's run, or an unreadable record: never mix them
        fresh = f"{primary}.{wanted[:16]}"
    return RunChoice(fresh, note=f"{name}: the spec learns something other than the run in {shown(latest)} ({changes}): starting a"
                                 f" fresh run in {shown(fresh)} and keeping that one; --resume continues it instead")


def record_fingerprint(run_dir: str, learned: dict) -> None:
    write_json(os.path.join(run_dir, FINGERPRINT_FILE), {"fingerprint": fingerprint.fingerprint(learned), "learned": learned})


def checked_job(document: dict, env_ids: Collection[str] | None, notes: list[str] | None = None) -> JobSpec:
    """The job checked as `kuberl validate` checks it: its spec, its metadata's labels and annotations as the API
    server checks them (`kubectl apply` refuses a label value 'bad value!'; `kuberl run` ran it), and, where
    gymnasium is here (`env_ids`), its env made as the trainer makes it (envspaces.env_problem). What validate
    warns of the env (a package it needs missing here, gymnasium's own words) goes to `notes`."""
    metadata = document.get("metadata")
    meta = metadata_problems(metadata) if isinstance(metadata, dict) else []
    try:
        spec = validate_job(document, env_ids=env_ids)
    except InvalidJob as e:
        raise InvalidJob([p for p in meta if all(q.path != p.path for q in e.problems)] + e.problems) from None
    if env_ids is not None:  # gymnasium is here: make the env as validate does, before any run directory or pod
        from ..core.envclass import job_class_check
        from ..core.envspaces import job_env_problems

        # a note (a module or package not found here) is said, and the refusal left to the trainer: a pod's own
        # PYTHONPATH may hold it. Unsaid, ALE/Pong-v5 without ale-py started 4 ranks that failed 45 s later.
        problems, class_notes = job_class_check(spec, os.getcwd(), sys.path, sys.builtin_module_names, sys.meta_path)
        meta += problems + job_env_problems(spec, notes)
        if notes is not None:
            notes += class_notes
    if meta:
        raise InvalidJob(meta)
    return spec


def from_flag(problem: Problem, args: argparse.Namespace, file_document: Any = None) -> str:
    """` (from --set KEY=…)` when the problem is at a field a flag set, not one the file holds, or at a
    block the flag brought in (`--set ppo.x=…` on a DQN job: "spec.ppo: only allowed with algorithm: ppo")."""
    keys = [("spec.workers", "--workers")] if getattr(args, "workers", None) is not None else []
    keys += [(set_path(s.partition("=")[0]), f"--set {s}") for s in getattr(args, "set", [])]
    for path, flag in reversed(keys):
        if problem.path == path or problem.path.startswith((path + ".", path + "[")):
            return f" (from {safetext.one_line(flag)})"
        if path.startswith(problem.path + ".") and not _holds(file_document, problem.path):
            return f" (from {safetext.one_line(flag)})"
    return ""


def _holds(document: Any, path: str) -> bool:
    """Whether the job file itself has the field at a dotted `path` (spec.ppo)."""
    node = document
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return True


def cmd_run(args: argparse.Namespace, docs: list, env_ids: Collection[str] | None = None) -> int:
    """`kuberl run` of a file's documents, as `kuberl.tools.documents.runnable_documents` gives them
    (a PyTorchJob already converted: the caller's, so the local runner imports the core only). `env_ids`, the
    gymnasium ids registered here, refuse a misspelt spec.env.id as `kuberl validate` does, before a run
    directory is chosen or a pod started."""
    global OUTPUT
    OUTPUT = Output(sys.stdout, sys.stderr)
    try:
        with contextlib.ExitStack() as ports:  # the rendezvous port's reservation, held until the run ends
            return _cmd_run(args, docs, env_ids, ports)
    finally:
        OUTPUT = None  # this run's stdout: a later run (a test's, in the same process) has its own


def cmd_run_seeds(args: argparse.Namespace, docs: list, env_ids: Collection[str] | None = None) -> int:
    """`kuberl run --seeds 1,2,3`: each seed's run as `kuberl run --set seed=N` runs it, one after another, then one
    summary (local.seeds). A Ctrl-C stops the seed running with a checkpoint and starts no other; the same command
    then resumes that seed and skips those that already succeeded."""
    global OUTPUT
    if getattr(args, "private_network", False):  # once, for every seed: the runner enters its namespace once
        refused = private_network()
        if refused is not None:
            print(f"kuberl run: --private-network: this machine gives no network namespace ({refused})", file=sys.stderr)
            return EXIT_CANNOT_RUN
    runs: list[seeds.SeedRun] = []
    with Interrupts() as between:  # a Ctrl-C between two seeds' runs (each run has its own while it lasts)
        for k, seed in enumerate(args.seeds):
            if between.count or (runs and (runs[-1].code is None or not seeds.goes_on(runs[-1]))):
                runs.append(seeds.SeedRun(seed, None))
                continue
            seeded = argparse.Namespace(**{**vars(args), "set": [*args.set, f"seed={seed}"], "seeds": None,
                                           "one_of_seeds": True, "private_network": False})
            OUTPUT = Output(sys.stdout, sys.stderr)
            say(f"seed {seed} ({k + 1} of {len(args.seeds)}): as kuberl run --set seed={seed}")
            OUTPUT = None
            code = cmd_run(seeded, docs, env_ids)
            runs.append(seed_run(seeded, docs, seed, code))
        job = job_name(docs, args.file) or "job"
        OUTPUT = Output(sys.stdout, sys.stderr)
        try:
            for line in seeds.summary_lines(job, runs, shown):
                say(line)
        finally:
            OUTPUT = None
    # a Ctrl-C that came between two runs stopped the seeds as one during a run does
    return EXIT_INTERRUPTED if between.count else seeds.exit_code(runs)


def job_name(docs: list, path: str) -> str | None:
    """The job's metadata.name in the file, or None where the file holds no valid one (its run said why)."""
    with contextlib.suppress(LocalRunError, InvalidJob, TypeError, AttributeError):
        name = split_documents(docs, path)[0]["metadata"]["name"]
        return name if isinstance(name, str) else None
    return None


def seed_run(args: argparse.Namespace, docs: list, seed: int, code: int) -> seeds.SeedRun:
    """What one seed's run left (`args`: that seed's kuberl run): its run directory, as the rerun would choose it
    (the run of the same learned values), and its last evaluation; nothing for a job refused before it ran."""
    try:
        document = split_documents(docs, args.file)[0]
        spec = validate_job(apply_overrides(document, args.workers, args.set))
    except (LocalRunError, InvalidJob, TypeError, AttributeError):
        return seeds.SeedRun(seed, code)
    run_dir = choose_run(args.dir, document["metadata"]["name"], fingerprint.learned_values(spec)).run_dir
    if not has_run(run_dir):
        return seeds.SeedRun(seed, code)
    progress = newest_progress_file(run_dir)
    record = last_progress(os.path.dirname(progress)) if progress else {}
    timesteps = finite_number(record.get("timesteps"))
    return seeds.SeedRun(seed, code, run_dir, finite_number(record.get("eval_return")),
                         int(timesteps) if timesteps is not None else None)


def _cmd_run(args: argparse.Namespace, docs: list, env_ids: Collection[str] | None, ports: contextlib.ExitStack) -> int:
    if getattr(args, "private_network", False):  # before any thread starts: a user namespace takes one thread only
        refused = private_network()
        if refused is not None:
            print(f"kuberl run: --private-network: this machine gives no network namespace ({refused})", file=sys.stderr)
            return EXIT_CANNOT_RUN
    try:
        document, configmaps = split_documents(docs, args.file)
        file_document = document
        spec_of = document.get("spec") if isinstance(document, Mapping) else None
        check_overrides(args.set, spec_of.get("algorithm") if isinstance(spec_of, Mapping) else None)
        document = apply_overrides(document, args.workers, args.set)
        env_notes: list[str] = []
        spec = checked_job(document, env_ids, env_notes)
        warnings = [f"{p}{from_flag(p, args, file_document)}" for p in target_warnings(spec, env_ids) + budget_warnings(spec)]
        warnings += [safetext.one_line(note) for note in env_notes]
    except LocalRunError as e:
        print(f"kuberl run: {e}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    except BadOverride as e:
        for p in e.problems:
            print(f"kuberl run: {p}", file=sys.stderr)
        return 1
    except InvalidJob as e:
        metadata = document.get("metadata") if isinstance(document, Mapping) else None
        name = metadata.get("name") if isinstance(metadata, Mapping) else None
        named = f" {safetext.one_line(repr(name))}" if isinstance(name, str) and name else ""  # as kuberl validate says it
        print(f"{args.file}: RLTrainingJob{named} is invalid ({len(e.problems)} problem(s)):", file=sys.stderr)
        for p in e.problems:
            print(f"  {p}{from_flag(p, args, file_document)}", file=sys.stderr)
        for warning in podschema.unknown_fields(podschema.template_of(document)):  # `comand:`: why "needs a command"
            print(f"{args.file}: warning: {safetext.one_line(warning)}", file=sys.stderr)
        return 1
    for warning in warnings:  # as kuberl validate warns, before anything is decided about the run
        say(f"warning: {warning}")
    job = Job(document["metadata"]["name"], spec)
    if layout := job_path_problems(job):  # before a run directory is chosen: what `kuberl validate` warned of
        for problem in layout:
            print(f"kuberl run: {job.name} cannot run here: {problem}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    if spec.run_policy.suspend:  # the loop would wait for a resume nothing here gives (a cluster's Kueue, an edit)
        print(f"kuberl run: {job.name} cannot run here: spec.runPolicy.suspend is true, and nothing here unsuspends it"
              " (in a cluster Kueue admits it, or you edit the job): --set runPolicy.suspend=false runs it", file=sys.stderr)
        return EXIT_CANNOT_RUN
    learned = fingerprint.learned_values(spec)
    choice = choose_run(args.dir, job.name, learned, getattr(args, "resume", False),
                        start_over=spec.checkpoint.when_none_usable == "StartOver")
    if choice.refused:
        print(f"kuberl run: {choice.refused}", file=sys.stderr)
        return 1
    run_dir = choice.run_dir  # absolute: pod roots must not depend on a cwd
    if choice.note and not getattr(args, "one_of_seeds", False):  # --seeds: another seed's run is no change to name
        say(choice.note)
    recorded = os.path.join(run_dir, "status.json")
    if choice.succeeded and (unmet := target_not_met(last_status(read_regular_file(recorded, RECORD_LIMIT) or "", recorded), spec)):
        say(f"{job.name} succeeded before in {shown(run_dir)}, but {unmet}: training it on")
    elif choice.succeeded:
        try:
            model = paths_of(job, run_dir, job_uid(run_dir))["model"]
        except LocalRunError as e:  # a uid file edited, or a link left there
            print(f"kuberl run: {job.name} cannot run here: {e}", file=sys.stderr)
            return EXIT_CANNOT_RUN
        where = f"; its model is {shown(model)}" if model and os.path.exists(model) else ""
        say(f"{job.name} already succeeded with this spec in {shown(run_dir)}{where}; nothing to train"
            f" (delete {shown(run_dir)} to train it again)")
        return 0
    # a fresh run beside the job's others (runs/<job>.<fingerprint>): one refused at once is not kept (_run_held)
    fresh = os.path.basename(run_dir) != job.name and not os.path.lexists(run_dir)
    with contextlib.ExitStack() as held:
        try:
            os.makedirs(run_dir, exist_ok=True)
            # held from before job.yaml is written: a second run of the job, refused, must not replace the first's
            held.enter_context(run_lock(run_dir))
            # chosen once the run is sure to start: a rerun that trains nothing, or is locked out, takes no port
            document = with_free_rendezvous_port(document, spec, ports)
            spec = validate_job(document)
            job = Job(job.name, spec)
            with open_to_write(os.path.join(run_dir, "job.yaml")) as f:
                yaml.safe_dump(document, f, sort_keys=False)
            record_fingerprint(run_dir, learned)
        except LocalRunError as e:
            say(f"{job.name} cannot run here: {e}")
            return EXIT_CANNOT_RUN
        except OSError as e:
            print(f"kuberl run: --dir {args.dir}: cannot keep the run in {run_dir}: {e.strerror or e}", file=sys.stderr)
            return EXIT_CANNOT_RUN
        return _run_held(args, job, spec, run_dir, configmaps, fresh)


def target_warnings(spec: JobSpec, env_ids: Collection[str] | None) -> list[Problem]:
    """A success.targetReturn above what the job's env can return, where gymnasium is here (`env_ids`) to tell
    its registered env (envspaces.target_ceiling_problem): `kuberl validate` warns the same."""
    if env_ids is None:
        return []
    from ..core.envspaces import target_ceiling_problem

    unreachable = target_ceiling_problem(spec)
    return [unreachable] if unreachable else []


def budget_warnings(spec: JobSpec) -> list[Problem]:
    """An off-policy job whose budget ends before it learns (rules.learning_budget_warning), and tracking with no server
    named (rules.tracking_warnings): `kuberl validate` warns the same."""
    from ..core.rules import learning_budget_warning, tracking_warnings

    return [p for p in (learning_budget_warning(spec),) if p is not None] + tracking_warnings(spec, netrc_hosts())


def netrc_hosts() -> list[str]:
    """The machines with a login in the user's ~/.netrc (`wandb login` keeps its key there): the ranks read it, their
    HOME being the user's. None when there is no such file, it is no regular file (a link to one is read), or it does
    not parse."""
    import netrc

    try:
        if not stat.S_ISREG(os.stat(os.path.join(os.path.expanduser("~"), ".netrc")).st_mode):
            return []  # a FIFO there held kuberl run at its open, before any pod, until something wrote to it
        return list(netrc.netrc().hosts)
    except (OSError, netrc.NetrcParseError):
        return []


def target_not_met(status: Mapping[str, Any], spec: JobSpec) -> str | None:
    """Why a run that succeeded with this spec's learned fields is trained on (None: it is not): it stopped early at
    an evaluation below success.targetReturn, raised since. The success rule decides when a run stops, not what it
    learns, so a higher target is the same run continued; a run that spent its budget needs totalTimesteps raised."""
    progress = status.get("progress") if isinstance(status.get("progress"), Mapping) else {}
    evaluated, timesteps = progress.get("evalReturn"), progress.get("timesteps")
    target = spec.success.target_return if spec.trainer == "kuberl" else None
    if target is None or isinstance(evaluated, bool) or not isinstance(evaluated, (int, float)) or evaluated >= target:
        return None
    if isinstance(timesteps, bool) or not isinstance(timesteps, int) or timesteps >= (spec.total_timesteps or 0):
        return None
    return f"its last evaluation, {evaluated:g} at {timesteps:,} timesteps, is below success.targetReturn {target:g}"


def crowded_note(spec: JobSpec, cores: int) -> str | None:
    """A job sized for a cluster (the Pong examples: 4 ranks of 64 envs), run on a laptop: its ranks share this machine's
    cores, its first update comes minutes in, and a Ctrl-C waits for the update in flight. Says how to run it at this
    machine's size; None where every rank has a core."""
    ranks = spec.workers * spec.procs
    if ranks <= cores:
        return None
    envs = spec.env.num_envs if spec.trainer == "kuberl" and spec.env is not None else None
    each = f" of {envs} envs each" if envs and envs > 1 else ""
    smaller = " ".join(f"--set {field}" for field, wanted in [
        ("workers=1", spec.workers > 1),
        ("gpusPerWorker=0", spec.gpus_per_worker > 0),  # procsPerWorker follows the GPUs, and must equal them
        ("procsPerWorker=1", (spec.procs_per_worker or 1) > 1),
        ("env.numEnvs=8", (envs or 0) > 8)] if wanted)
    return (f"note: {ranks} ranks{each} share this machine's {cores} core(s): updates come slowly, and Ctrl-C waits for"
            f" the one in flight; at this machine's size: {smaller} (a run of its own: what it learns changes)")


def cluster_refusal_note(job: Job, spec: JobSpec) -> str | None:
    """The line for a job whose pods a cluster refuses and `kuberl run` runs: the operator checks them at the
    baseline level by default, and your own processes need no such check. None for pods that pass (kuberl's own pass
    restricted): a line about security levels on every run read as an alarm."""
    ranks = sorted({0, 1, spec.workers - 1} & set(range(spec.workers)))
    violations = podsecurity.check_pods((render_pod(job, NAMESPACE, "0", rank) for rank in ranks), "baseline")
    if not violations:
        return None
    fields = ", ".join(v.path for v in violations[:2]) + (f" and {len(violations) - 2} more" if len(violations) > 2 else "")
    return (f"note: a cluster's operator (at its default pod security level, baseline) would refuse these pods for"
            f" {fields}; here they run as your own processes. kuberl validate names every field")


def refused_at_once(status: Mapping, checkpoints: str) -> bool:
    """Whether a run failed with a configuration error (an env its image lacks the package for) having written nothing
    to its checkpoint directory: its run directory holds only the refusal, which the console showed."""
    failed = any(c.get("type") == lifecycle.CONDITION_FAILED and c.get("status") == "True"
                 and c.get("reason") == contract.REASON_CONFIG_ERROR for c in status.get("conditions", []))
    try:
        return failed and not any(os.scandir(checkpoints))
    except OSError:
        return False


def _run_held(args: argparse.Namespace, job: Job, spec: JobSpec, run_dir: str, configmaps: Mapping[str, Mapping[str, str]],
              fresh: bool = False) -> int:
    """cmd_run's run, with the run directory's lock held. A `fresh` run directory (made for this run beside the job's
    others) that holds only a configuration error's refusal is removed: left, it was the job's latest run, which the
    next changed spec was compared with and --resume continued. The job's first run directory keeps its refusal."""
    if getattr(args, "pod_security", "privileged") == "privileged" and (note := cluster_refusal_note(job, spec)):
        say(note)  # said once the job is known to be valid
    budget = f"{spec.total_timesteps:,} timesteps" if spec.total_timesteps else "custom trainer"
    say(f"{job.name}: {spec.workers} pod(s) x {spec.procs} process(es), {budget}; logs and checkpoints in {shown(run_dir)}")
    if note := crowded_note(spec, os.cpu_count() or 1):
        say(note)
    if short := gpus_short(host_gpus(), spec.workers, spec.gpus_per_worker):
        say(f"{job.name} cannot run here: {short}")
        return EXIT_CANNOT_RUN
    rendered = render_pod(job, NAMESPACE, "0", 0, target="local")
    pod = kubelet_mount_paths(rendered)
    skipped = containers_not_run(pod)
    if skipped:
        say(f"not run here (only the trainer container's command runs): {', '.join(skipped)}")
    for warning in podschema.unknown_fields(spec.template):
        say(f"warning: {warning}")
    written = template_fields(rendered, spec.template)  # the template's command[1], not a bare one of no container
    if (entry := absent_entry_script(pod, os.getcwd())) is not None:  # refused before any pod: each printed torchrun's traceback
        field, path = entry
        why = ("is a file of the image, in no volume, and not on this machine: mount a volume at its directory (a hostPath"
               " to your checkout), or run it in a cluster whose image has it" if path.startswith("/") else
               f"is not in {os.getcwd()}, where kuberl run starts the pods (the container names no workingDir): run"
               " kuberl run from the directory that holds it")
        say(f"{job.name} cannot run here: {written(f'spec.containers[{names.TRAINER_CONTAINER}].{field}') or field} {path!r} {why}")
        return EXIT_CANNOT_RUN
    baked = [f"{written(f'spec.containers[{names.TRAINER_CONTAINER}].{field}') or field} {path!r}" for field, path in image_scripts(pod)]
    absent_scripts = [path for _, path in image_scripts(pod)]
    if baked:
        say(f"warning: {', '.join(baked)}: a file of the image, in no volume: here the pod runs this machine's files;"
            " mount a volume at its directory (a hostPath to your checkout), or it fails with No such file")
    loopback = loopback_rendezvous(pod) if spec.workers > 1 else []
    if loopback:
        say(f"warning: {', '.join(loopback)} rendezvous at localhost: in a cluster each pod's localhost is its own, so"
            f" these {spec.workers} pods never meet there (they wait until a timeout); here they share this machine's"
            " and do. Meet at $(MASTER_ADDR):$(MASTER_PORT), or give torchrun no endpoint (PET_RDZV_ENDPOINT is worker 0)")
    global CONSOLE
    console = Console(OUTPUT or sys.stdout, spec.total_timesteps, os.path.join(run_dir, "checkpoints"), getattr(args, "verbose", False),
                      return_label=training_return_label(spec.algorithm))
    CONSOLE = console
    try:
        code, status, wall = _run(job, run_dir, out=console, configmaps=configmaps, absent_scripts=absent_scripts)
    except LocalRunError as e:
        say(f"{job.name} cannot run here: {e}")
        return EXIT_CANNOT_RUN
    except OSError as e:  # the run directory's disk filled or went away: every rank is already stopped
        say(f"{job.name} stopped: {e.strerror or e}{f': {e.filename}' if e.filename else ''}")
        return EXIT_CANNOT_RUN
    finally:
        console.close()
        CONSOLE = None
    curve = None
    # The job has ended: a Ctrl-C now (drawing the curve takes a second or two) skips the curve, not the summary,
    # and the exit code stays the job's; it ended the command in a KeyboardInterrupt traceback, exit 130.
    with Interrupts() as interrupts:
        if args.plot and code in (0, EXIT_INTERRUPTED):
            if not interrupts.count:
                say("drawing the learning curve (a few seconds; Ctrl-C skips it)")  # the summary comes after it
            try:
                curve = plot(run_dir) if not interrupts.count else None
            except FileNotFoundError:
                pass
            except PlotNotWritten as e:  # a directory left at learning-curve.png: the summary still comes
                say(f"learning curve {e}")
        # one summary: what happened, and where the model, checkpoints, logs and learning curve are
        ended = summary(job, paths_of(job, run_dir, job_uid(run_dir)), status, code, wall)
        if fresh and code != 0 and refused_at_once(status, os.path.join(run_dir, "checkpoints")):
            shutil.rmtree(run_dir, ignore_errors=True)
            say(with_host_paths(ended, os.path.join(run_dir, "checkpoints"))
                + f"; nothing trained, so {shown(run_dir)} is not kept (the worker's refusal is above)")
            return code
        say(with_host_paths(ended, os.path.join(run_dir, "checkpoints"))  # as the console showed the same reason
            + f"; logs {shown(os.path.join(run_dir, 'logs'))}" + (f"; learning curve {shown(curve)}" if curve else
                                                                  f"; learning curve: kuberl plot {shown(run_dir)}"
                                                                  if not args.plot and progress_files(os.path.join(run_dir, "checkpoints")) else "")
            + compare_note(run_dir, shown))
    return code
