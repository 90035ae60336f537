"""Rank 0's Weights & Biases run (spec.tracking.wandb), one backend of tracking.TrackedRun, as CleanRL's `--track`
logs one: the scalars against `global_step` (define_metric), the learned fields as config, the job's name as the
run's name, its namespace and uid in the notes and the gang generation logging now in the summary (GENERATION_KEY).
The key, mode and server are the client's own variables (WANDB_API_KEY, WANDB_MODE, WANDB_BASE_URL), as for any W&B
client; the run's id is kept in RUN_RECORD in the checkpoint directory and the run resumed with it (resume="allow").
The run's files go under the checkpoint directory (wandb/, unless WANDB_DIR says elsewhere), so an offline run
outlives the pod for `wandb sync`.

The final model is not uploaded: W&B's artifact upload at a run's end is the slowest call there is, and the run's
end waits for it only a little (tracking.SEND_DEADLINE_SECONDS); the model stays in the checkpoint volume.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import tempfile
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

from kuberl.core import safetext

from .tensorboard import MORE_FIELDS, shown_fields
from .tracking import (
    SEND_DEADLINE_SECONDS,
    End,
    Points,
    TrackedRun,
    read_record,
    without_credentials,
    write_record,
)

RUN_RECORD = "wandb-run.json"  # in the checkpoint directory: the run this kuberl run logs into
ENV_BASE_URL = "WANDB_BASE_URL"
ENV_MODE = "WANDB_MODE"
ENV_DIR = "WANDB_DIR"
# Where W&B's service process (wandb-core) writes its debug log: Go's os.UserCacheDir, $XDG_CACHE_HOME else
# $HOME/.cache (W&B's Python side: WANDB_CACHE_DIR, else platformdirs' user_cache_dir, which reads XDG_CACHE_HOME too)
ENV_CACHE_HOME = "XDG_CACHE_HOME"
# The cache home of a process whose own is not writable: a pod's HOME is / on a read-only root filesystem
FALLBACK_CACHE_HOME = os.path.join(tempfile.gettempdir(), "kuberl-cache")
# The client's own variables, read from the trainer's env and handed to each run: the client reads the process's
# environment once, at its first run, and a process here may start more than one
CLIENT_ENV = {ENV_MODE: "mode", ENV_BASE_URL: "base_url", "WANDB_API_KEY": "api_key"}
STEP_METRIC = "global_step"  # CleanRL's x-axis: every scalar is drawn against it, not W&B's own call count
# the gang generation logging now, as MLflow's kuberl.generation tag: in the summary, which each generation sets anew
# (config is what is learned)
GENERATION_KEY = "kuberl/generation"
# An id as W&B makes one (8 of [a-z0-9]) or a user could pass (W&B refuses :;,#?/' and spaces): anything else in a
# record is the tenant's edit, not a run of ours
RUN_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
# The client's retries bounded so that a server that refuses or never answers gives up within the run's end's
# deadline: with its defaults a refused server held wandb.init 92 s past its 7 s import (2 s with these), so a run's
# end said lines were left unsent instead of why; and its finish waits until every point is uploaded. GraphQL
# (starting and resuming the run): one retry, 3 s each; the file stream (the points): bounded at the end by
# finish_timeout.
CLIENT_SETTINGS: dict[str, Any] = {
    "console": "off",  # the training thread's prints stay the pod's log; W&B would wrap sys.stdout from this thread
    "silent": True,  # its banner lines: rank 0 says the run and its URL once itself
    "init_timeout": SEND_DEADLINE_SECONDS * 3,
    "finish_timeout": SEND_DEADLINE_SECONDS / 2,
    "x_graphql_retry_max": 1,
    "x_graphql_timeout_seconds": 3.0,
    "x_graphql_retry_wait_max_seconds": 1.0,
    "x_file_stream_retry_max": 3,
    "x_file_stream_timeout_seconds": 5.0,
    "x_file_stream_retry_wait_max_seconds": 2.0,
}


# --- what is logged (pure) -----------------------------------------------------------------------------------------

def config(learned: Mapping[str, Any]) -> dict[str, Any]:
    """The learned fields (fingerprint.learned_values) as W&B config: nested as the spec nests them (W&B's UI names
    them ppo.learningRate), the fields TensorBoard's text and MLflow's params show, then MORE_FIELDS counting the rest
    (tensorboard.shown_fields: env.kwargs may nest tens of thousands, each a config key the server stores), and a
    period in a key (env.kwargs may hold any) made an underscore, as W&B's config keys hold none."""
    def keyed(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {str(k).replace(".", "_"): keyed(v) for k, v in value.items()}
        return value

    shown, more = shown_fields(learned)
    return {**{key.replace(".", "_"): keyed(value) for key, value in shown.items()}, **({MORE_FIELDS: more} if more else {})}


def notes(job: str, namespace: str, uid: str) -> str:
    """The run's notes: which job it is (its uid tells two jobs of one name apart)."""
    return f"kuberl job {namespace or 'default'}/{job}, uid {uid or '-'}"


def rows(values: list[tuple[str, float, int]]) -> list[dict[str, float | int]]:
    """Points, (tag, value, timesteps) each, as W&B history rows, one a `run.log` call: consecutive points of one
    step in one row with `global_step` set, a new row where the step changes or a tag comes again at the same step
    (two episodes ending at one step are two points, as TensorBoard keeps them)."""
    found: list[dict[str, float | int]] = []
    for tag, value, step in values:
        if not found or found[-1][STEP_METRIC] != step or tag in found[-1]:
            found.append({STEP_METRIC: step})
        found[-1][tag] = value
    return found


def record(base_url: str, entity: str | None, project: str, run_id: str) -> dict[str, str | None]:
    return {"baseUrl": without_credentials(base_url), "entity": entity, "project": project, "runId": run_id}


def run_to_resume(recorded: object, base_url: str, entity: str | None, project: str) -> tuple[str | None, str | None]:
    """(the W&B run id in RUN_RECORD to log on into, or None for a new run; why a record was refused, or None). Only
    a record of this server, entity and project is resumed (a job pointed elsewhere starts a run there), and only an
    id as W&B makes them."""
    if not isinstance(recorded, Mapping) or not isinstance(recorded.get("runId"), str):
        return None, None
    if (recorded.get("baseUrl"), recorded.get("entity"), recorded.get("project")) != (
            without_credentials(base_url), entity, project):
        return None, None
    if not RUN_ID.fullmatch(recorded["runId"]):
        return None, f"run id {safetext.one_line(recorded['runId'])[:80]!r} in {RUN_RECORD} is no W&B run id"
    return recorded["runId"], None


def settings_refusal(error: ValueError) -> str:
    """W&B's refusal of its settings (a pydantic ValidationError), each setting named by the trainer's variable it came
    from (WANDB_MODE: Input should be 'online', ...), without the value (a URL's password)."""
    variables = {setting: name for name, setting in CLIENT_ENV.items()}
    errors = error.errors() if callable(getattr(error, "errors", None)) else []
    said = [f"{variables.get(str(e['loc'][0]), e['loc'][0]) if e.get('loc') else 'W&B settings'}: {e.get('msg')}"
            for e in errors[:len(CLIENT_ENV)]]
    return "; ".join(said) or str(error)


def cache_home(environ: Mapping[str, str], writable: Callable[[str], bool]) -> str | None:
    """The XDG_CACHE_HOME this process needs before W&B starts, or None to leave its environment as it is: a pod's
    HOME is / on a read-only root filesystem, where wandb-core could not write its debug log under ~/.cache (rank 0's
    log got "main: failed to get logger path" and a dozen INFO lines). A cache home the user named is theirs."""
    if environ.get(ENV_CACHE_HOME):
        return None
    home = environ.get("HOME")
    return None if home and writable(os.path.join(home, ".cache")) else FALLBACK_CACHE_HOME


def writable_directory(path: str) -> bool:
    """Whether a process may create files in `path`, or create `path` itself where it does not exist yet (its
    nearest existing parent writable); a read-only filesystem is not writable, to root either (access(2): EROFS)."""
    while not os.path.lexists(path):
        parent = os.path.dirname(path)
        if parent == path:
            return False
        path = parent
    return os.path.isdir(path) and os.access(path, os.W_OK | os.X_OK)


def private_directory(path: str) -> str | None:
    """`path`, made (0700) where missing, if it is a directory of this user's own that no one else may write and no
    link; else a new one beside it (mkdtemp). A pod's /tmp and kuberl run's are the pod's own, but a trainer started
    in a shared /tmp met another user's directory or link made there first, and wrote W&B's logs where they chose.
    None where neither can be made."""
    with contextlib.suppress(OSError):
        os.makedirs(path, mode=0o700, exist_ok=True)
        found = os.lstat(path)
        if stat.S_ISDIR(found.st_mode) and found.st_uid == os.geteuid() and not found.st_mode & 0o022:
            return path
    try:
        return tempfile.mkdtemp(prefix=f"{os.path.basename(path)}-", dir=os.path.dirname(path))
    except OSError:
        return None


# --- the client (the tracker's sender thread) ------------------------------------------------------------------------

def wandb_run(checkpoint_dir: str, project: str, entity: str | None, group: str | None, tags: list[str],
              learned: Mapping[str, Any], job: str, namespace: str, uid: str, restart: int,
              environ: MutableMapping[str, str] = os.environ, log: Callable[[str], None] = print) -> TrackedRun:
    """Rank 0's tracker of spec.tracking.wandb; with WANDB_MODE=disabled, one that says so once and starts nothing
    (W&B's disabled run would still hand out an id to record). A cache home this process cannot write is replaced
    (cache_home) here, on the training thread, before the sender thread or W&B's service process starts."""
    # private_directory None: W&B's debug log goes unwritten, as before: tracking does not need it
    if (environ.get(ENV_MODE) != "disabled" and (home := cache_home(environ, writable_directory)) is not None
            and (home := private_directory(home)) is not None):
        environ[ENV_CACHE_HOME] = home  # this process's and its children's (wandb-core's): the pod's env is unchanged
    backend = WandbBackend(checkpoint_dir, project, entity, group, tags, config(learned), job, notes(job, namespace, uid),
                           restart, environ, log)
    disabled = environ.get(ENV_MODE) == "disabled"
    return TrackedRun(backend, log, f"spec.tracking.wandb is set but {ENV_MODE} is disabled in the trainer's environment:"
                                    " not tracked" if disabled else None)


class WandbBackend:
    name = "W&B"

    def __init__(self, checkpoint_dir: str, project: str, entity: str | None, group: str | None, tags: list[str],
                 run_config: dict[str, Any], job: str, run_notes: str, restart: int, environ: Mapping[str, str],
                 log: Callable[[str], None]):
        self.checkpoint_dir, self.project, self.entity, self.group, self.tags = checkpoint_dir, project, entity, group, list(tags)
        self.config, self.job, self.notes, self.restart, self.log = run_config, job, run_notes, restart, log
        self.base_url = environ.get(ENV_BASE_URL, "")  # "": the client's default server
        self.client_env = {setting: environ[name] for name, setting in CLIENT_ENV.items() if environ.get(name)}
        self.directory = None if environ.get(ENV_DIR) else checkpoint_dir  # None: the client reads WANDB_DIR
        self.run: Any = None

    def where(self) -> str:
        return self.project_where() + (f" (run {self.run.id})" if self.run is not None else "")

    def project_where(self) -> str:
        project = f"{self.entity}/{self.project}" if self.entity else self.project
        return f"project {project}" + (f" at {without_credentials(self.base_url)}" if self.base_url else "")

    def connect(self) -> None:
        import wandb  # here: a run without tracking pays nothing (5 s of import on a loaded core)

        if self.directory is not None and os.path.islink(files := os.path.join(self.directory, "wandb")):
            # the checkpoint volume is the tenant's, and W&B writes its run's files through a link there
            raise OSError(f"{files} is a link, which W&B would write its run's files through: remove it")
        path = os.path.join(self.checkpoint_dir, RUN_RECORD)
        run_id, refused = run_to_resume(read_record(path), self.base_url, self.entity, self.project)
        if refused:
            self.log(f"W&B: {refused}: starting a new run")
        try:
            settings = wandb.Settings(**CLIENT_SETTINGS, **self.client_env)
        except ValueError as e:  # pydantic's ValidationError: its first line names no variable
            raise ValueError(settings_refusal(e)) from None
        run = wandb.init(project=self.project, entity=self.entity, group=self.group, tags=self.tags, notes=self.notes,
                         name=self.job, config=self.config, id=run_id, resume="allow", dir=self.directory,
                         reinit="create_new", settings=settings)
        try:
            run.define_metric(STEP_METRIC)
            run.define_metric("*", step_metric=STEP_METRIC)
            run.summary[GENERATION_KEY] = self.restart
            write_record(path, record(self.base_url, self.entity, self.project, run.id))
        except BaseException:
            run.finish(exit_code=1)  # the tracker stops here: the run it started is ended failed, not left open
            raise
        self.run = run
        resumed = "logging on into" if run_id is not None else "started"
        place = run.url if not run.offline else f"offline in {run.dir.removesuffix('/files')} (upload it with `wandb sync`)"
        self.log(f"W&B: {resumed} run {run.id} in {self.project_where()}: {place}")

    def send(self, lines: list[Points]) -> None:
        for row in rows([value for line in lines for value in line.values]):
            self.run.log(row)

    def end(self, end: End) -> None:
        """The run finished (a stopped one too: the next generation resumes it); a failed one with exit code 1,
        which W&B shows as failed."""
        self.run.finish(exit_code=1 if end.status == "FAILED" else 0)
