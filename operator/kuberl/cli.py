"""The `kuberl` command line: validate, render, convert, crd, run, plot, eval and operator.

Files as kubectl takes them: `kuberl validate a.yaml b.yaml`, `-f FILE` (repeatable), `-` for stdin,
and for validate and render a directory (its .yaml, .yml and .json files). Exit codes, the same for
every subcommand, are EXIT_CODES below (printed by `kuberl --help`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import sys
from collections.abc import Callable
from typing import Any

import yaml

from .core import (
    jobstatus,
    poddefaults,
    podschema,
    safetext,
    torchrun,
    validation,
    yamlwriter,
)
from .core.installhint import pip_install
from .core.podsecurity import (
    DEFAULT_LEVEL,
    LEVELS,
    OPEN_FIELDS,
    Violation,
    check_pods,
    parse_open_fields,
    parse_service_accounts,
)
from .core.render import (
    DEFAULT_MONITORING_NAMESPACE,
    DEFAULT_MONITORING_POD_LABELS,
    DEFAULT_OPERATOR_NAMESPACE,
)
from .core.rules import validate_job
from .core.spec import JobSpec, SuccessSpec
from .core.validation import InvalidJob, Problem, namespace_problems
from .core.yamlreader import UnreadableSpec, load_documents
from .local.seeds import seeds_argument, seeds_flag_problem, seeds_usage_problem
from .operator.config import (
    MIN_KUBE_API_QPS,
    MIN_PEERING_LIFETIME,
    SHUTDOWN_TIMEOUT_SECONDS,
    OperatorConfig,
    WatchBounds,
)


def load_jobs(path: str) -> list[dict]:
    """Every document of a job file (or stdin), read the one safe way
    (`spec.load_documents`); a file that cannot be read exits 1 with one line."""
    try:
        with open(path, "rb") if path != "-" else sys.stdin.buffer as f:
            docs = load_documents(f)  # 1e-3 is a number, as kubectl reads it
    except (UnreadableSpec, OSError) as e:
        raise SystemExit(f"{path}: {e.strerror if isinstance(e, OSError) and e.strerror else e}") from None
    if not docs:
        raise SystemExit(f"{path}: no YAML document found")
    return docs


def registered_env_ids() -> frozenset[str] | None:
    """The gymnasium ids registered here (`rules.env_id_problem` checks spec.env.id against them), ale-py's
    included where it is installed (the trainer registers them before it reads an id: PongNoFrameskip-v4), or
    None when gymnasium is not installed here and the trainer must tell."""
    try:
        import gymnasium
    except ImportError:
        return None
    with contextlib.suppress(ImportError):
        import ale_py  # 30 ms

        gymnasium.register_envs(ale_py)
    return frozenset(gymnasium.registry)


def env_problems(spec: JobSpec) -> tuple[list[Problem], list[str]]:
    """What making the job's env here tells (kwargs it refuses, spaces its algorithm cannot learn on), where
    gymnasium is installed here (`envspaces.env_problem`), and what reading a "module:Class" env's module tells
    (`envclass`: a class it lacks; a note where it cannot tell); the trainer says the same at start, after the
    pods. A success.targetReturn above what the env can return is a note too (envspaces.target_ceiling_problem).
    Returns (problems, notes)."""
    if registered_env_ids() is None:
        return [], []
    from .core.envclass import job_class_check
    from .core.envspaces import job_env_problems, target_ceiling_problem

    problems, notes = job_class_check(spec, os.getcwd(), sys.path, sys.builtin_module_names, sys.meta_path)
    problems += job_env_problems(spec, notes)
    if unreachable := target_ceiling_problem(spec):  # a warning: a reward wrapper of the user's own changes it
        notes.append(str(unreachable))
    return problems, notes


def valid_jobs(path: str, args: argparse.Namespace | None = None) -> tuple[list[tuple[str, JobSpec, str | None]], bool]:
    """Every job in a file with its parsed spec and declared namespace; problems go to
    stderr, each with its field path. `args`' --set and --workers (validate's, as run's) apply to
    each job first. Returns (valid jobs, whether any was invalid)."""
    from .core.podsource import configmap_problems, is_configmap
    from .core.rules import learning_budget_warning, tracking_warnings
    from .core.validation import metadata_problems
    from .tools.documents import runnable_documents

    valid, failed = [], False
    docs = runnable_documents(load_jobs(path), path)
    if all(is_configmap(doc) for doc in docs):  # as for an empty file: "valid" would hide the wrong file
        raise SystemExit(f"{path}: no RLTrainingJob document" + (", only ConfigMaps" if docs else ""))
    for job in docs:
        notes: list[str] = []
        written, flag_problems = job, []
        if not is_configmap(job):
            try:  # the job a run with these flags would run: its name and metadata too (--set metadata.name=…)
                job = overridden(job, args)
            except InvalidJob as e:
                flag_problems = e.problems
        metadata = (job.get("metadata") or {}) if isinstance(job, dict) else {}
        name = metadata.get("name", "?") if isinstance(metadata, dict) else "?"
        if is_configmap(job):  # beside the job, for its template to read (kuberl run mounts it; kubectl applies it)
            problems = configmap_problems(job)
            failed = failed or bool(problems)
            if problems:
                print(f"{path}: ConfigMap {name!r} is invalid ({len(problems)} problem(s)):", file=sys.stderr)
            for p in problems:
                print(f"  {p}", file=sys.stderr)
            continue
        problems = metadata_problems(metadata) if isinstance(metadata, dict) else []
        try:
            if flag_problems:
                raise InvalidJob(flag_problems)
            spec = validate_job(job, env_ids=registered_env_ids())
            made, notes = env_problems(spec)
            if unlearned := learning_budget_warning(spec):
                notes.append(str(unlearned))
            notes += [str(untracked) for untracked in tracking_warnings(spec)]
            problems += jobstatus.template_problems(name, spec) + made
        except InvalidJob as e:
            problems = [p for p in problems if not any(q.path == p.path for q in e.problems)] + e.problems
        if problems:
            failed = True
            print(f"{path}: RLTrainingJob {name!r} is invalid ({len(problems)} problem(s)):", file=sys.stderr)
            for p in problems:
                print(f"  {p}{flagged(p, args, written)}", file=sys.stderr)
        template = podschema.template_of(job)
        for warning in podschema.unknown_fields(template) + podschema.priority_warnings(template) + notes:
            print(f"{path}: {name}: warning: {safetext.one_line(warning)}", file=sys.stderr)
        if not problems:
            valid.append((name, spec, metadata.get("namespace") if isinstance(metadata.get("namespace"), str) else None))
    return valid, failed


def overridden(job: Any, args: argparse.Namespace | None) -> Any:
    """`job` with `kuberl run`'s --set and --workers applied as run applies them (local.runner.apply_overrides), so
    validate checks what a run with those flags would run; an InvalidJob naming a --set that names no field."""
    settings, workers = (getattr(args, "set", None) or []), getattr(args, "workers", None)
    if not isinstance(job, dict) or (not settings and workers is None):
        return job
    from .local.runner import apply_overrides, check_overrides

    spec = job.get("spec")
    check_overrides(settings, spec.get("algorithm") if isinstance(spec, dict) else None)
    return apply_overrides(job, workers, settings)


def flagged(problem: Problem, args: argparse.Namespace | None, written: Any) -> str:
    """` (from --set KEY=…)` where a flag, not the file, set the field refused (local.runner.from_flag)."""
    if args is None or (not getattr(args, "set", None) and getattr(args, "workers", None) is None):
        return ""
    from .local.runner import from_flag

    return from_flag(problem, args, written)


def pod_security_violations(name: str, spec: JobSpec, args: argparse.Namespace) -> list[Violation]:
    """The job's rendered pods checked as the operator checks them. Pods differ
    only by rank (rank 0 alone mounts the checkpoints), so the first, second
    and last stand for all: 1024 workers with a 1.5 MiB template would
    otherwise take a minute and gigabytes just to say "valid"."""
    from .core.render import PLACEHOLDER_UID, Job, render_pod

    job = Job(name, spec)
    ranks = sorted({0, 1, spec.workers - 1} & set(range(spec.workers)))
    pods = (render_pod(job, getattr(args, "namespace", None) or "default", PLACEHOLDER_UID, rank) for rank in ranks)
    return check_pods(pods, args.pod_security, parse_service_accounts(getattr(args, "allowed_service_accounts", None)),
                      getattr(args, "forbid_pod_fields", None) or ())


def secure_jobs(path: str, args: argparse.Namespace) -> tuple[list[tuple[str, JobSpec, str | None]], bool]:
    """`valid_jobs`, then the pod security level: a job whose pods violate it
    is reported (every field by its path in the pod) and left out."""
    jobs, failed = valid_jobs(path, args)
    secure = []
    for name, spec, namespace in jobs:
        violations = pod_security_violations(name, spec, args)
        if violations:
            failed = True
            print(f"{path}: RLTrainingJob {name!r} violates the {args.pod_security} Pod Security Standard"
                  f" ({len(violations)} field(s) of its pods, set through spec.template):", file=sys.stderr)
            for v in violations:
                print(f"  {v}", file=sys.stderr)
            # `kuberl run` of the same file starts it: that is no contradiction, and it says why
            print(f"  (a cluster's operator at level {args.pod_security} refuses it; kuberl run, at level privileged on your"
                  " own machine, runs it: --pod-security privileged checks as kuberl run does)", file=sys.stderr)
        else:
            secure.append((name, spec, namespace))
    return secure, failed


def cmd_validate(args: argparse.Namespace) -> int:
    jobs, failed = secure_jobs(args.file, args)
    for name, spec, _ in jobs:
        target = spec.success.target_return
        print(
            f"{name}: valid: "
            + (f"{spec.algorithm} on {spec.env.id}, " if spec.trainer == "kuberl" else "custom trainer, ")
            + f"{spec.workers} worker(s) x {spec.procs} process(es) = world size {spec.world_size}"
            + (f", {spec.total_timesteps} timesteps" if spec.total_timesteps else "")
            + (f", stop at eval return {target:g}" if target is not None else "")
            + "".join(f", {mode}" for mode in training_modes(spec))
            + f"; pods pass the {args.pod_security} Pod Security Standard"
        )
        unread = torchrun.template_problem({"template": spec.template, "procsPerWorker": spec.procs_per_worker,
                                            "gpusPerWorker": spec.gpus_per_worker}, unreadable=True)
        if unread:
            print(f"{args.file}: {name}: warning: {safetext.one_line(f'{unread[0]}: {unread[1]}')}", file=sys.stderr)
        for problem in local_layout_problems(name, spec):
            print(f"{args.file}: {name}: warning: kuberl run cannot run it here: {problem}", file=sys.stderr)
        for field in loopback_fields(name, spec):
            print(f"{args.file}: {name}: warning: {field} meets at localhost, each pod's own in a cluster: these"
                  f" {spec.workers} pods never meet there; meet at $(MASTER_ADDR):$(MASTER_PORT)", file=sys.stderr)
    return 1 if failed else 0


def training_modes(spec: Any) -> list[str]:
    """The opt-ins a summary names: each changes how the run learns or whether it reproduces."""
    modes = ["deterministic"] if spec.deterministic else []
    if spec.ppo is not None and spec.ppo.learn_while_collecting:
        modes.append("learning while collecting (one update of policy lag)")
    if spec.success.eval_while_training:
        modes.append("evaluating while training")
    return modes


def local_layout_problems(name: str, spec: Any) -> list[str]:
    """The mounts `kuberl run` refuses (a cluster lays them out), in the words it refuses them with."""
    from .core.render import Job
    from .local.sandbox import job_path_problems

    return job_path_problems(Job(name, spec))


def loopback_fields(name: str, spec: Any) -> list[str]:
    """The trainer container's fields that rendezvous at localhost, in a job of several pods."""
    from .core.render import PLACEHOLDER_UID, Job, render_pod
    from .local.dns import loopback_rendezvous

    return loopback_rendezvous(render_pod(Job(name, spec), "default", PLACEHOLDER_UID, 0)) if spec.workers > 1 else []


def cmd_render(args: argparse.Namespace) -> int:
    """Print every child object like `helm template`; the uid is a placeholder
    (all zeros) because only the API server assigns one."""
    from .core.render import (
        DEFAULT_IMAGE,
        PLACEHOLDER_UID,
        Job,
        render_job,
        render_podgroup,
    )

    class BlockDumper(yamlwriter.ReadableDumper):
        """Multi-line strings (config.json) as readable `|` blocks; letters as written."""

    BlockDumper.add_representer(
        str, lambda d, s: d.represent_scalar("tag:yaml.org,2002:str", s, style="|" if "\n" in s else None)
    )
    jobs, failed = secure_jobs(args.file, args)
    for name, spec, declared in jobs:
        if declared and args.namespace and declared != args.namespace:
            # kubectl's own refusal (cli-runtime's resource builder) for the same mismatch
            print(f"{args.file}: the namespace from the provided object {declared!r} does not match the namespace"
                  f" {args.namespace!r}. You must pass '--namespace={declared}' to perform this operation.", file=sys.stderr)
            failed = True
            continue
        namespace = declared or args.namespace or "default"
        objects = render_job(Job(name, spec), namespace, PLACEHOLDER_UID, default_image=DEFAULT_IMAGE,
                             operator_namespace=args.operator_namespace, monitoring_namespace=args.monitoring_namespace,
                             monitoring_pod_labels=args.monitoring_pod_labels, operator_pod_labels=args.operator_pod_labels)
        defaults = args.pod_defaults or poddefaults.NONE  # as the operator lays them under a new job's pods
        conflicts = list(dict.fromkeys(c for o in objects if o["kind"] == "Pod" for c in poddefaults.conflicts(o, defaults)))
        if conflicts:  # the operator's refusal of the job (PodSecurity), before any object
            print(f"{args.file}: RLTrainingJob {name!r} sets what --pod-defaults enforces: {'; '.join(conflicts)}", file=sys.stderr)
            failed = True
            continue
        objects = [poddefaults.apply(o, defaults) if o["kind"] == "Pod" else
                   render_podgroup(Job(name, spec), namespace, defaults.priority_class_name) if o["kind"] == "PodGroup"
                   else o for o in objects]
        if getattr(args, "output", "yaml") == "json":
            args.collected.extend(objects)  # one List for every file: for_each_file prints it
            continue
        for obj in objects:
            print(f"---\n# {obj['kind']} {obj['metadata']['name']} (RLTrainingJob {name})")
            sys.stdout.write(yamlwriter.dump_all([obj], BlockDumper, sys.stdout.encoding, sort_keys=False, width=120))
    return 1 if failed else 0


def cmd_run(args: argparse.Namespace) -> int:
    """`kuberl run`, after the file passed the one safe reader (one line and
    exit 1 otherwise, as for validate); read once, so `kuberl run -` takes stdin."""
    from .tools.documents import runnable_documents

    # a PyTorchJob converted here, once: the local runner imports the core only
    docs = runnable_documents(load_jobs(args.file), args.file, one_job=True)
    if args.pod_security != "privileged" or args.forbid_pod_fields:  # privileged is said by the run, once the job is valid
        from .core.podsource import is_configmap
        from .local.runner import apply_overrides

        for job in docs:
            if is_configmap(job):
                continue
            name = (job.get("metadata") or {}).get("name", "?") if isinstance(job, dict) else "?"
            try:
                spec = validate_job(apply_overrides(job, args.workers, args.set))
            except InvalidJob:
                continue  # the run itself reports it, with every problem
            violations = pod_security_violations(name, spec, args)
            if violations:
                print(f"{args.file}: RLTrainingJob {name!r} violates the {args.pod_security} Pod Security Standard:", file=sys.stderr)
                for v in violations:
                    print(f"  {v}", file=sys.stderr)
                return 1
    from .local.runner import cmd_run as run_here
    from .local.runner import cmd_run_seeds

    return (cmd_run_seeds if getattr(args, "seeds", None) else run_here)(args, docs, env_ids=registered_env_ids())


def cmd_convert(args: argparse.Namespace) -> int:
    """A PyTorchJob, TrainJob or JobSet file as RLTrainingJob YAML on stdout; what was not carried over, one line each on
    stderr. Nothing on stdout unless every document converts (a pipe to kubectl applies all or none)."""
    from .tools.convert import to_yaml
    from .tools.documents import (
        convert_documents,
        one_job_problem,
        runtimes_of,
        select_documents,
    )

    read = load_jobs(args.file)
    kept, skipped, labels = select_documents(read)
    for line in skipped:
        print(f"{args.file}: {line}", file=sys.stderr)
    several = one_job_problem(labels)
    if several:
        print(f"{args.file}: {several}", file=sys.stderr)
        return 1
    docs, notes, failures = convert_documents(kept, args.procs_per_worker, args.image, runtimes_of(read))
    for label, e in failures:
        verdict = "is invalid" if label.startswith("ConfigMap ") else "cannot be converted"  # kept as is, but checked
        print(f"{args.file}: {label} {verdict} ({len(e.problems)} problem(s)):", file=sys.stderr)
        for p in e.problems:
            print(f"  {p}", file=sys.stderr)
    if failures:
        return 1
    if not notes:
        print(f"{args.file}: no PyTorchJob, TrainJob or JobSet document" + (", only ConfigMaps" if docs else ""), file=sys.stderr)
        return 1
    for label, job_notes in notes:
        for note in job_notes:
            print(f"{args.file}: {label}: {note}", file=sys.stderr)
    sys.stdout.write(to_yaml(docs, sys.stdout.encoding))
    return 0


def cmd_crd(args: argparse.Namespace) -> int:
    from .core.crd import crd

    print("# Generated by `make manifests` from operator/kuberl/core/spec.py; do not edit.")
    yaml.safe_dump(crd(), sys.stdout, sort_keys=False, width=120)
    return 0


def add_pod_security(p: argparse.ArgumentParser, default: str, why: str) -> None:
    p.add_argument("--pod-security", choices=LEVELS, default=default, metavar="LEVEL",
                   help=f"Pod Security Standard the job's pods must meet: {', '.join(LEVELS)} (default {default}: {why})")
    p.add_argument("--forbid-pod-fields", type=open_fields, metavar="FIELD[,FIELD...]",
                   help=f"pod fields every level leaves open, refused like a Pod Security violation: {', '.join(OPEN_FIELDS)}"
                        " (tolerations: only a keyless operator: Exists; default: none)")


def open_fields(text: str) -> frozenset[str]:
    """An argparse type: `--forbid-pod-fields`, each one of podsecurity.OPEN_FIELDS."""
    try:
        return parse_open_fields(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


# A liveness path aiohttp routes as written (no `{}` route variables, no query): the chart's values.schema.json has the same pattern.
HEALTH_PATH = r"^/[-A-Za-z0-9._~/]*$"


def url_path(text: str) -> str:
    """An argparse type: the path of an HTTP endpoint."""
    if re.fullmatch(HEALTH_PATH, text) is None:
        raise argparse.ArgumentTypeError(f"expected a path such as /healthz: '/', then letters, digits, '-', '.', '_', '~' or '/' (got {text!r})")
    return text


def namespace_name(none: str | None = None) -> Any:
    """An argparse type: a namespace the API server accepts (`namespace_problems`), or `none` where the flag
    takes one for "no namespace"; a flag's wrong value is a usage error (exit 2), as for every other flag."""
    def parse(text: str) -> str:
        problems = [] if text == none else namespace_problems("", text)
        if problems:
            raise argparse.ArgumentTypeError(problems[0].message)
        return text
    return parse


def label_selector(text: str) -> dict[str, str]:
    """An argparse type: KEY=VALUE[,KEY=VALUE...] as a matchLabels, each key and value one the API server takes; '' none."""
    labels: dict[str, str] = {}
    for pair in filter(None, (p.strip() for p in text.split(","))):
        key, equals, value = pair.partition("=")
        if not equals:
            raise argparse.ArgumentTypeError(f"expected KEY=VALUE[,KEY=VALUE...] (got {pair!r})")
        problems = validation.label_key_problems("", {key: value}) + validation.label_value_problems("", {key: value})
        if problems:
            raise argparse.ArgumentTypeError(f"{pair!r}: {problems[0].message}")
        labels[key] = value
    return labels


def pod_defaults_file(path: str) -> Any:
    """An argparse type: the chart's trainer.podDefaults from a Helm values file (or the podDefaults block alone)."""
    try:
        with open(path, encoding="utf-8") as f:
            documents = load_documents(f.read())
    except (OSError, UnreadableSpec) as error:
        raise argparse.ArgumentTypeError(f"{path}: {error}") from None
    document = documents[0] if documents else None
    trainer = document.get("trainer") if isinstance(document, dict) else None
    block = trainer.get("podDefaults") if isinstance(trainer, dict) else document
    if isinstance(block, dict):  # values as strings, as the chart hands them over (Helm's toString: 2 "2", false "false")
        block = {**block, **{k: {key: str(v).lower() if isinstance(v, bool) else str(v) for key, v in block[k].items()}
                             for k in ("labels", "annotations", "nodeSelector") if isinstance(block.get(k), dict)}}
    try:
        return poddefaults.parse(block)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{path}: {error}") from None


def add_operator_pod_labels(p: argparse.ArgumentParser) -> None:
    p.add_argument("--operator-pod-labels", type=label_selector, default={}, metavar="KEY=VALUE[,...]",
                   help="of the operator's namespace, only pods carrying these labels (the operator's own) reach trainer"
                        " metrics ports (default: every pod there; the chart passes its operator pods' labels)")


def add_monitoring_pod_labels(p: argparse.ArgumentParser) -> None:
    default = ",".join(f"{k}={v}" for k, v in DEFAULT_MONITORING_POD_LABELS.items())
    p.add_argument("--monitoring-pod-labels", type=label_selector, default=dict(DEFAULT_MONITORING_POD_LABELS), metavar="KEY=VALUE[,...]",
                   help="of the monitoring namespace, only pods carrying these labels reach trainer metrics ports"
                        f" ('' for every pod there; default {default}: Prometheus' pods as prometheus-operator labels them)")


def positive(kind: type) -> Any:
    """An argparse type: a number of `kind` above zero."""
    return _number(kind, lambda value: value > 0 and value != float("inf"), f"a positive {kind.__name__}")


def non_negative(kind: type) -> Any:
    """An argparse type: a finite number of `kind`, zero or more."""
    return _number(kind, lambda value: 0 <= value < float("inf"), f"a {kind.__name__} of 0 or more")


def _number(kind: type, accepts: Callable[[Any], bool], expected: str) -> Any:
    """An argparse type: `kind(text)` where `accepts` takes it (NaN fails any comparison, so never), else
    'expected <expected> (got ...)'."""
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected} (got {text!r})") from None
        if not accepts(value):
            raise argparse.ArgumentTypeError(f"expected {expected} (got {text!r})")
        return value
    return parse


def kube_api_qps(text: str) -> float:
    """An argparse type for --kube-api-qps: 0 (no limit) or MIN_KUBE_API_QPS and up, finite. Below that every
    request waits its turn for seconds to hours once the burst is spent: the operator watches its jobs and cannot act."""
    return _number(float, lambda value: value == 0 or MIN_KUBE_API_QPS <= value < float("inf"),
                   f"0 (no limit) or a number of requests a second from {MIN_KUBE_API_QPS:g} up (client-go's default"
                   " is 5): below that the operator's requests queue for seconds to hours each and it falls behind its jobs")(text)


def episodes(text: str) -> int:
    """`kuberl eval --episodes`: spec.success.evalEpisodes' bounds (each episode is an env of its own, all made and
    stepped at once, so the count is the memory and time one step takes)."""
    value = positive(int)(text)
    bound = next(m.le for m in SuccessSpec.model_fields["eval_episodes"].metadata if hasattr(m, "le"))
    if value > bound:
        raise argparse.ArgumentTypeError(f"expected at most {bound}, spec.success.evalEpisodes' bound: each episode is an"
                                         f" env of its own, all stepped at once (got {text!r})")
    return value


EXIT_CODES = """exit codes (every subcommand):
  0    done (a run that had already succeeded included)
  1    invalid input: a file, job or --set refused, each problem named; a run whose job failed
  2    usage: an unknown option, a missing or extra argument (the subcommand's usage is printed)
  3    could not run here: kuberl run's run directory locked or unwritable, a port taken, a script of the image not on this machine, a suspended job; kuberl operator without a cluster
  130  kuberl run interrupted (Ctrl-C, a closed terminal, a reader of its output that quit): every rank saved;
       the same command resumes"""


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("kuberl")
    except PackageNotFoundError:
        return "unknown (not installed)"


def add_files(p: argparse.ArgumentParser, many: bool, directories: bool) -> None:
    """Job files as kubectl takes them: positional or -f (repeatable), `-` for stdin, a directory's files."""
    what = "job files" if many else "the job file"
    p.add_argument("files", nargs="*", metavar="FILE", help=f"{what}; - for stdin" + ("; a directory: its .yaml/.yml/.json files" if directories else ""))
    p.add_argument("-f", "--filename", dest="filenames", action="append", default=[], metavar="FILE",
                   help="as kubectl: the same as a FILE argument" + (", repeatable" if many else ""))
    p.set_defaults(files_many=many, files_directories=directories)


def resolve_files(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """args.files from FILE arguments and -f, directories expanded; args.file the first. Usage errors exit 2."""
    given = [*args.files, *args.filenames]
    if not given:
        parser.error("a job file is required: FILE or -f FILE (- for stdin)")
    if given.count("-") > 1:
        parser.error("- (stdin) can be read once")
    files = []
    for path in given:
        if path == "-" or not os.path.isdir(path):
            files.append(path)
            continue
        if not args.files_directories:
            parser.error(f"{path} is a directory: give the job file")
        found = sorted(os.path.join(path, n) for n in os.listdir(path)
                       if n.endswith((".yaml", ".yml", ".json")) and os.path.isfile(os.path.join(path, n)))
        if not found:
            parser.error(f"{path}: no .yaml, .yml or .json file in this directory")
        files += found
    if not args.files_many and len(files) > 1:
        parser.error(f"takes one job file (got {len(files)}: {', '.join(files)})")
    args.files, args.file = files, files[0]


def for_each_file(command: Any) -> Any:
    """Run `command` on each file in turn: one unreadable file is reported and the rest still checked;
    the worst exit code wins. `render -o json` prints one List of every file's objects."""
    def run(args: argparse.Namespace) -> int:
        args.collected = []
        codes = []
        for path in args.files:
            try:
                codes.append(command(argparse.Namespace(**{**vars(args), "file": path})))
            except SystemExit as e:  # load_jobs: the file cannot be read, said in one line
                if not isinstance(e.code, str):
                    raise
                print(e.code, file=sys.stderr)
                codes.append(1)
        if getattr(args, "output", None) == "json":
            print(json.dumps({"apiVersion": "v1", "kind": "List", "items": args.collected}, indent=2))
        return max(codes)
    return run


def add_overrides(p: argparse.ArgumentParser, verb: str) -> None:
    """--workers and --set, which `kuberl run` runs with and `kuberl validate` checks with."""
    p.add_argument("--workers", type=int, help=f"pods to {verb}, instead of the job's spec.workers (as --set workers=N)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a spec field, e.g. --set totalTimesteps=20000")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kuberl", description="Distributed RL training on Kubernetes, or here.",
                                     epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"kuberl {version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add_command(name: str, **kwargs: Any) -> argparse.ArgumentParser:
        """A subcommand whose --help says what it does (the line `kuberl --help` lists) and ends with the exit
        codes, which hold for every subcommand."""
        kwargs.setdefault("description", kwargs.get("help"))
        return sub.add_parser(name, epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs)
    parser.subcommands = sub.choices  # main() reports an argument error with its subcommand's usage
    p = add_command("validate", help="check job files and report every problem with its field path")
    add_files(p, many=True, directories=True)
    add_overrides(p, "check")
    add_pod_security(p, DEFAULT_LEVEL, "as the operator checks by default")
    p.set_defaults(func=for_each_file(cmd_validate))
    p = add_command("crd", help="print the RLTrainingJob CustomResourceDefinition")
    p.set_defaults(func=cmd_crd)
    # Each command below lives beside the code it drives; imported on use so
    # `kuberl validate` stays fast and torch-free.
    p = add_command("render", help="print every object the operator creates for a job, like helm template")
    add_files(p, many=True, directories=True)
    p.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml",
                   help="yaml (documents, each named in a comment; the default) or json (one v1 List, as kubectl -o json)")
    p.add_argument("--namespace", "-n", type=namespace_name(), default=None, help="as kubectl: the job's metadata.namespace, else 'default'")
    p.add_argument("--operator-namespace", type=namespace_name(), default=DEFAULT_OPERATOR_NAMESPACE,
                   help="the operator's namespace: its scrapes of rank 0 pass the job's NetworkPolicy (default %(default)s)")
    p.add_argument("--monitoring-namespace", type=namespace_name(none=""), default=DEFAULT_MONITORING_NAMESPACE,
                   help="Prometheus' namespace: its scrapes pass the NetworkPolicy ('' for none; default %(default)s)")
    add_monitoring_pod_labels(p)
    add_operator_pod_labels(p)
    p.add_argument("--pod-defaults", type=pod_defaults_file, metavar="VALUES.yaml",
                   help="lay the chart's trainer.podDefaults from this Helm values file under the pods, as the operator does")
    add_pod_security(p, DEFAULT_LEVEL, "as the operator checks by default")
    p.set_defaults(func=for_each_file(cmd_render))
    p = add_command("convert", help="print the RLTrainingJob for a Kubeflow PyTorchJob or TrainJob, or a JobSet; what changes goes to stderr")
    add_files(p, many=False, directories=False)
    p.add_argument("--procs-per-worker", type=positive(int), default=None,
                   help="processes per pod where the manifest cannot tell (torchrun's --nproc-per-node cpu or auto)")
    p.add_argument("--image", default=None, help="the trainer image where a TrainJob leaves it to its runtime")
    p.set_defaults(func=cmd_convert)
    p = add_command("run", help="run a job here: the same pods, as local processes")
    add_files(p, many=False, directories=False)
    add_overrides(p, "run")
    p.add_argument("--plot", action="store_true",
                   help="write a PNG learning curve into the run directory when done (kuberl plot -o puts one elsewhere)")
    p.add_argument("-v", "--verbose", action="store_true", help="also print each checkpoint rank 0 writes")
    p.add_argument("--dir", default="runs", help="where runs keep checkpoints, logs and plots (default runs, in the directory you run from)")
    p.add_argument("--resume", action="store_true",
                   help="continue the job's latest run even if the spec now learns something else (e.g. a raised totalTimesteps);"
                        " by default such a spec starts a fresh run beside it")
    p.add_argument("--seeds", type=seeds_argument, metavar="N,N[,N...]",
                   help="run the job once per seed, one after another, each a run of its own (as --set seed=N), then"
                        " say each seed's result and their mean; Ctrl-C stops them all, the same command resumes")
    add_pod_security(p, "privileged", "the pods run as your own processes, on your own machine")
    p.add_argument("--private-network", action="store_true",
                   help="run in a network namespace of its own (Linux): nothing the pods listen on is reachable from"
                        " outside, a custom torchrun's store included, and the pods reach no other host")
    p.set_defaults(func=cmd_run)
    p = add_command("plot", help="write a PNG learning curve of a local run, or of several runs compared")
    p.add_argument("run_dirs", metavar="RUN_DIR", nargs="+",
                   help="a run directory of kuberl run (runs/<job>), or a progress.jsonl (a cluster run's: docs/cluster.md);"
                        " several, or a directory of runs (runs), draw every run on one figure, a colour each")
    p.add_argument("-o", "--output", metavar="FILE.png",
                   help="where the PNG goes (default RUN_DIR/learning-curve.png; for several runs learning-curves.png"
                        " in the directory they sit in)")
    p.set_defaults(func=lambda a: __import__("kuberl.local.curves", fromlist=["cmd_plot"]).cmd_plot(a))
    p = add_command("eval", help="play a trained model on its job's env: mean return, a GIF, a TorchScript export")
    p.add_argument("path", metavar="RUN_DIR|MODEL.pt", nargs="+",
                   help="a run directory of kuberl run (played by default: its final-model.pt, the last weights, or those"
                        " that met success.targetReturn), a final-model.pt, a best-model.pt or a ckpt-*.pt; several, or a"
                        " directory of runs (runs), each scored on the same episodes, and the best of each env named")
    p.add_argument("--best", action="store_true",
                   help="play the run directory's best-model.pt instead: the weights of its best evaluation (kept as"
                        " SB3's EvalCallback keeps best_model)")
    p.add_argument("--episodes", type=episodes, default=10, help="episodes to play, by the trainer's evaluation protocol (default 10)")
    p.add_argument("--seed", type=int, default=0, help="seed of the episodes and of sampled actions (default 0)")
    p.add_argument("--max-steps", type=positive(int), default=EVAL_MAX_STEPS, metavar="N",
                   help="steps after which an episode that has not ended is cut, its return counted so far, and said"
                        f" (default {EVAL_MAX_STEPS}: above every registered episode limit; an env with a huge"
                        " max_episode_steps and a policy that never fails would play forever)")
    p.add_argument("--video", metavar="FILE.gif", help="also play one episode and write it as an animated GIF (the trainer's video extra)")
    p.add_argument("--export", metavar="FILE.pt", help="also write the deterministic policy as TorchScript, for serving")
    p.add_argument("--allow-env-module", action="append", default=[], metavar="MODULE",
                   help="a \"module:Class\" env id may import MODULE (and its submodules), installed or in this directory as the"
                        " run's pods found it: a model file can name any module")
    p.set_defaults(func=cmd_eval)
    p = add_command("operator", help="run the kopf operator (standalone by default)")
    p.add_argument("--namespace", "-n", action="append", type=namespace_name(), default=[], help="watch these namespaces (default: all)")
    p.add_argument("--peering", help="kopf peering object name (several replicas); standalone when unset")
    p.add_argument("--priority", type=int, default=0, help="peering priority; distinct per replica")
    p.add_argument("--peering-lifetime", type=positive(int), metavar="SECONDS",
                   help="how long a replica's peering record outlives its last keepalive, so how long a standby waits"
                        f" to take over from a replica that died (default {OperatorConfig.peering_lifetime}, at least"
                        f" {MIN_PEERING_LIFETIME}: kopf renews it 5-10 s before it expires)")
    p.add_argument("--health-port", type=int, default=8080, help="port of the liveness endpoint (default 8080)")
    p.add_argument("--health-path", type=url_path, default="/healthz", help="path of the liveness endpoint (default /healthz)")
    p.add_argument("--metrics-port", type=int, default=8081, help="port of the operator's Prometheus metrics (default 8081)")
    p.add_argument("--trainer-image", help="default trainer image (else $KUBERL_TRAINER_IMAGE, else the built-in default)")
    p.add_argument("--listen-address", default="0.0.0.0", help="address of the health and metrics endpoints (default %(default)s)")
    p.add_argument("--scrape-interval", type=positive(float),
                   help=f"seconds between scrapes of a running job's rank 0 (default {OperatorConfig.scrape_interval:g})")
    p.add_argument("--scrape-timeout", type=positive(float),
                   help=f"seconds a scrape of rank 0 may take in all (default {OperatorConfig.scrape_timeout:g})")
    p.add_argument("--watch-timeout", type=positive(int),
                   help="seconds the API server keeps each watch open; the client drops one silent a little longer, and"
                        f" /healthz fails when watches stay silent past that (default {WatchBounds.server_timeout:g})")
    p.add_argument("--shutdown-timeout", type=positive(float), default=SHUTDOWN_TIMEOUT_SECONDS, metavar="SECONDS",
                   help="after SIGTERM or SIGINT, the operator exits within this long whatever hangs, saying what did"
                        f" (default {SHUTDOWN_TIMEOUT_SECONDS:g}: inside the 30 s grace period the chart gives its pod)")
    p.add_argument("--max-concurrent-reconciles", type=positive(int),
                   help="job reconciles running at once, bounding the operator's burst on the API server"
                        f" (default {OperatorConfig.max_concurrent_reconciles})")
    p.add_argument("--kube-api-qps", type=kube_api_qps, metavar="QPS",
                   help="the operator's own API requests a second once its burst is spent (0: no limit, else at least"
                        f" {MIN_KUBE_API_QPS:g}; default {OperatorConfig.kube_api_qps:g}); kopf's watches, finalizers and"
                        " events are its own")
    p.add_argument("--kube-api-burst", type=positive(int), metavar="N",
                   help=f"API requests the operator may make at once before --kube-api-qps paces them (default {OperatorConfig.kube_api_burst})")
    p.add_argument("--monitoring-namespace", type=namespace_name(none=""), default=DEFAULT_MONITORING_NAMESPACE,
                   help="Prometheus' namespace, admitted to trainer metrics ports by each job's NetworkPolicy ('' for none; default %(default)s)")
    add_monitoring_pod_labels(p)
    add_operator_pod_labels(p)
    add_pod_security(p, DEFAULT_LEVEL, "a job whose pods violate it fails, every offending field named")
    p.add_argument("--allowed-service-accounts", metavar="NAME[,NAME...]",
                   help="service accounts a job's pods may run as, refused like a Pod Security violation otherwise (default: any)")
    p.set_defaults(func=cmd_operator)
    return parser


EVAL_MAX_STEPS = 100_000  # kuberl_trainer.policy.MAX_EVAL_STEPS, which this module cannot import (torch)


def cmd_eval(args: argparse.Namespace) -> int:
    """`kuberl eval`, from the trainer package (torch): the CLI itself never imports it."""
    try:
        from kuberl_trainer.policy import cmd_eval as evaluate
    except ImportError as e:
        print(f"kuberl eval: the trainer is not installed here ({e}): {pip_install(sys.executable)} kuberl-trainer", file=sys.stderr)
        return 1
    return evaluate(args)


OPERATOR_EXTRA = ("kopf", "aiohttp", "kubernetes_asyncio")  # kuberl[operator]; the core needs none of them


def cmd_operator(args: argparse.Namespace) -> int:
    """Run the operator, whose dependencies are the `operator` extra (the trainer image has no use for them)."""
    import importlib.util

    missing = [name for name in OPERATOR_EXTRA if importlib.util.find_spec(name) is None]
    if missing:
        print(f"kuberl operator: {', '.join(missing)} not installed; install the operator extra: {pip_install(sys.executable)} 'kuberl[operator]'",
              file=sys.stderr)
        return 1
    from .operator.config import no_cluster_problem

    if (no_cluster := no_cluster_problem(dict(os.environ), os.path.exists)) is not None:
        print(f"kuberl operator: {no_cluster}", file=sys.stderr)
        return 3
    from .operator.main import cmd_operator as run_operator

    return run_operator(args)


def split_set(argv: list[str]) -> str | None:
    """`--set KEY VALUE` (a space for the `=`): the usage error that says so, not "unrecognized arguments: VALUE"
    or "takes one job file (got 2: VALUE, job.yaml)"."""
    for flag, setting, following in zip(argv, argv[1:], argv[2:], strict=False):
        if flag == "--set" and "=" not in setting and not following.startswith("-"):
            return f"--set {setting} {following}: one argument, KEY=VALUE: --set {setting}={following}"
    return None


def main(argv: list[str] | None = None) -> Any:
    parser = build_parser()
    given = sys.argv[1:] if argv is None else argv
    if given[:1] == ["run"] and (negative := seeds_flag_problem(given)) is not None:
        parser.subcommands["run"].error(f"argument --seeds: {negative}")  # before argparse's "expected one argument"
    args, extra = parser.parse_known_args(argv)
    subparser = parser.subcommands.get(args.command) if args.command else None
    if args.command in ("run", "validate") and (hint := split_set(given)) is not None:
        subparser.error(hint)
    if args.command in ("run", "validate"):
        from .local.runner import setting_shape_problem

        for setting in args.set:
            if (wrong := setting_shape_problem(setting)) is not None:
                subparser.error(f"argument --set: {wrong}")
    if args.command == "run" and args.seeds and (conflict := seeds_usage_problem(args.set, args.resume)) is not None:
        subparser.error(f"argument --seeds: {conflict}")
    if extra:
        (subparser or parser).error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command is None:  # `kuberl` alone: what it can do, as kubectl does
        parser.print_help()
        return 0
    if argv is None and args.command not in ("run", "operator"):
        # `kuberl crd | head` ends quietly as cat or kubectl does, not in a BrokenPipeError traceback; `run` stops
        # its ranks with a checkpoint instead (local.console.Output), and the operator's output is a container's
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    if hasattr(args, "filenames"):
        resolve_files(args, subparser)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
