"""TensorBoard scalars of a run, written by rank 0 beside progress.jsonl (in names.TENSORBOARD_DIR), so that
`tensorboard --logdir runs` shows a kuberl run as it shows a CleanRL or SB3 one. The tags are CleanRL's
(charts/episodic_return, charts/SPS, losses/..., eval/episodic_return): kuberl's runs and CleanRL's overlay in one
TensorBoard, an algorithm's losses under its CleanRL script's tags (its class's TENSORBOARD_TAGS). The same numbers as
progress.jsonl's (SAC's and TD3's critic loss halved, as CleanRL writes qf_loss), against the same timesteps;
progress.jsonl stays the record that `kuberl plot` and a run's summary read.

Written with torch.utils.tensorboard's SummaryWriter, as CleanRL writes (it needs the `tensorboard` package, whose
server is the viewer too: `tensorboard --logdir runs` in the venv `make train` makes). Each line's points are flushed
as they are written (a line every few seconds; the flush waits for the writer's thread), so a killed rank loses none.
"""

from __future__ import annotations

import errno
import os
import re
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from kuberl.core import fingerprint, names

# progress.jsonl's keys as CleanRL's tags
TRAINING_TAGS = {"steps_per_second": "charts/SPS"}
# each finished episode's, as CleanRL writes them: one point per episode at the global step it ended at (rank 0's own
# episodes: the others' stay on their ranks, summed into progress.jsonl's mean, which `kuberl plot` draws)
EPISODE_TAGS = ("charts/episodic_return", "charts/episodic_length")
EVALUATION_TAG = "eval/episodic_return"
EPISODE_POINTS_PER_LINE = 1000  # at most, evenly spread: 4,096 envs of 1-step episodes end 130k between two lines
# an update's statistics (UpdateReport.losses' names, as progress.jsonl's `update` records them)
UPDATE_TAGS = {
    "policy_loss": "losses/policy_loss",
    "value_loss": "losses/value_loss",
    "entropy": "losses/entropy",
    "approx_kl": "losses/approx_kl",
    "clip_fraction": "losses/clipfrac",
    "q_value": "losses/q_values",
    "q1_value": "losses/qf1_values",  # SAC's and TD3's each critic's, as CleanRL's scripts for them write them
    "q2_value": "losses/qf2_values",
    "q1_loss": "losses/qf1_loss",
    "q2_loss": "losses/qf2_loss",
    "entropy_coefficient": "losses/alpha",
    "learning_rate": "charts/learning_rate",
}
# An algorithm's statistics that CleanRL's script for it writes under another tag, and the factor to CleanRL's number
# (an algorithm class's TENSORBOARD_TAGS): DQN's TD loss is dqn.py's losses/td_loss, so a kuberl and a CleanRL run
# draw in one panel, not two.
Renames = Mapping[str, tuple[str, float]]


def run_name(env_id: str, algorithm: str, seed: int) -> str:
    """The directory under names.TENSORBOARD_DIR rank 0 writes into, named as CleanRL names its runs
    (`{env_id}__{exp_name}__{seed}__{time}`, without the time: a resumed run is the same run), so TensorBoard's run
    list says which seed each one is: `cartpole-ppo.f41f0b81/checkpoints/<uid>/tensorboard/CartPole-v1__ppo__2`
    beside CleanRL's `CartPole-v1__ppo__2__1700000000`. A path separator of the env id (`ALE/Pong-v5`) is a `-`, and
    the env id is cut to keep the name within a filesystem's 255 bytes (spec.env.id takes 253 characters)."""
    env, *rest = (re.sub(r"[^A-Za-z0-9._:-]", "-", part) for part in (env_id, algorithm, str(seed)))
    suffix = "".join(f"__{part}" for part in rest)
    return env[: NAME_MAX - len(suffix)] + suffix


NAME_MAX = 255  # bytes of one file name (Linux's NAME_MAX); run_name's are ASCII


HYPERPARAMETERS_TAG = "hyperparameters"  # CleanRL's text of a run's arguments, in TensorBoard's Text tab
# A spec's learned fields are about 35; env.kwargs may add tens of thousands within the ConfigMap's 1 MiB, a table
# that stalled TensorBoard's Text tab for every run shown beside it
HYPERPARAMETER_ROWS = 200
MORE_FIELDS = "more_fields"  # where MLflow's params and W&B's config count the rest; no learned field is named so


def shown_fields(learned: Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
    """What every tracker shows of what a run learns with (fingerprint.learned_values), nested as the spec nests it:
    its first HYPERPARAMETER_ROWS fields (leaves, as fingerprint.flat counts them), another algorithm's block and
    any other None left out; and how many more there were, in words (None: none). TensorBoard's text, MLflow's
    params and W&B's config each show these: env.kwargs may nest tens of thousands of fields."""
    counted = 0

    def kept(values: Mapping[str, Any]) -> dict[str, Any]:
        nonlocal counted
        found: dict[str, Any] = {}
        for key, value in values.items():
            if isinstance(value, Mapping) and value:
                if inner := kept(value):  # a block whose every field was left out is no field
                    found[key] = inner
            elif value is not None:
                counted += 1
                if counted <= HYPERPARAMETER_ROWS:
                    found[key] = value
        return found

    shown = kept(learned)
    return shown, f"{counted - HYPERPARAMETER_ROWS:,} more fields (env.kwargs)" if counted > HYPERPARAMETER_ROWS else None


def hyperparameters(learned: Mapping[str, Any]) -> str:
    """What the run learns with (fingerprint.learned_values) as CleanRL's hyperparameters text, a markdown table of a
    row per field (shown_fields'): TensorBoard names a run by its directory, runs/<job>.<fingerprint>, and this says
    which is seed 2. Each path and value is one escaped line cut short (a kwargs key is as much the author's as its
    value)."""
    shown, more = shown_fields(learned)
    rows = [f"|{cell(fingerprint.short_path(path, 80))}|{cell(fingerprint.short_value(value, 80))}|"
            for path, value in (fingerprint.flat(shown) if shown else {}).items()]
    return "|param|value|\n|-|-|\n" + "\n".join(rows + ([f"|…|{more}|"] if more else []))


def cell(text: str) -> str:
    """One line of text as a markdown table cell: env.kwargs' keys and values are the spec author's, and a pipe in
    one split its row."""
    return text.replace("|", "&#124;")


def scalars(line: Mapping[str, Any], renames: Renames | None = None) -> list[tuple[str, float]]:
    """The TensorBoard scalars of one progress.jsonl line: a progress line's training return and speed, an
    evaluation's return, and the update statistics a line carries (under the algorithm's `renames` where CleanRL's
    differ). Every line repeats the last evaluation return, so only an evaluation's own line gives one; a resumed or
    checkpoint line gives nothing new."""
    found: list[tuple[str, float]] = []
    if line.get("steps_per_second") is not None:  # a progress line
        found += [(tag, line[key]) for key, tag in TRAINING_TAGS.items() if line.get(key) is not None]
    if line.get("evaluation") and line.get("eval_return") is not None:
        found.append((EVALUATION_TAG, line["eval_return"]))
    update = line.get("update")
    if isinstance(update, Mapping):
        for name, value in update.items():
            if name in UPDATE_TAGS and value is not None:
                tag, factor = (renames or {}).get(name, (UPDATE_TAGS[name], 1.0))
                found.append((tag, value * factor))
    return [(tag, float(value)) for tag, value in found]


# The writer's own threads (tensorboard's, one per event file): one that fails (a disk full, a quota) ends with its
# traceback in the rank's log, which the next flush raises again in the writer's caller, where it is said once.
_WRITER_THREADS: weakref.WeakSet[threading.Thread] = weakref.WeakSet()


class EpisodeSample:
    """The episodes finished between two progress lines, (global step, return, length) each, at most `limit` of
    them, evenly spread: every episode while they fit, then every 2nd, 4th, ... (each halving keeps the kept
    ones of even rank, so the ones kept are always those whose count since the last line is a multiple of the
    stride). A curve of 1,000 points a line reads as one of 130,000, at a bounded cost a line."""

    def __init__(self, limit: int = EPISODE_POINTS_PER_LINE):
        self.limit, self.stride, self.seen = limit, 1, 0
        self.kept: list[tuple[int, float, int]] = []

    def add(self, ended: list[tuple[int, float, int]]) -> None:
        self.kept += ended[(-self.seen) % self.stride:: self.stride]
        self.seen += len(ended)
        while len(self.kept) > self.limit:
            self.kept, self.stride = self.kept[::2], self.stride * 2

    def take(self) -> list[tuple[int, float, int]]:
        kept = self.kept
        self.kept, self.stride, self.seen = [], 1, 0
        return kept


def _writer_thread_hook(previous: Callable[[Any], object]) -> Callable[[Any], object]:
    def hook(args: Any) -> object:
        return None if args.thread in _WRITER_THREADS else previous(args)
    hook.kuberl_writer_threads = True  # type: ignore[attr-defined]
    return hook


class Scalars:
    """Rank 0's event file, opened at the first point (its writer is imported then, not at startup). A later
    generation (a gang restart, a resume) purges the points earlier ones wrote past where it starts (SummaryWriter's
    purge_step: its first point, the resumed checkpoint's timesteps), so TensorBoard draws one curve. A failed write is said once and writing stops
    (the directory is the tenant's); the run goes on."""

    def __init__(self, checkpoint_dir: str, log: Callable[[str], None] = print, text: str | None = None,
                 name: str | None = None):
        self.top = os.path.join(checkpoint_dir, names.TENSORBOARD_DIR)
        self.log_dir = os.path.join(self.top, name) if name else self.top  # `run_name`: TensorBoard's name of the run
        self.log = log
        self.text = text  # `hyperparameters`: written once, with the run's first file
        self.writer: Any = None
        self.failed = False
        self.pending = EpisodeSample()  # finished episodes, written with the next line's points

    def episodes(self, ended: list[tuple[int, float, int]]) -> None:
        """Finished episodes, (global step, return, length) each: written, and flushed, with the next progress line
        (every few seconds), not one file write per update (DQN makes thousands a second)."""
        if not self.failed:
            self.pending.add(ended)

    def write(self, line: Mapping[str, Any], renames: Renames | None = None) -> None:
        points = scalars(line, renames)
        if self.failed or not (points or line.get("resumed") or self.pending.kept):
            return
        self.put(line["timesteps"], points)

    def put(self, timesteps: int, points: list[tuple[str, float]]) -> None:
        try:
            if self.writer is None:
                for path in dict.fromkeys((self.top, self.log_dir)):  # the volume is the tenant's: files go nowhere else
                    if os.path.islink(path):
                        raise OSError(errno.ELOOP, "a link, not a directory", path)
                # an earlier generation's points from here on are superseded: the resumed checkpoint's timesteps, or
                # (a restart before any checkpoint) this generation's first point
                earlier = os.path.isdir(self.log_dir) and any(n.startswith("events.out.tfevents.") for n in os.listdir(self.log_dir))
                first = min([timesteps, *(step for step, _, _ in self.pending.kept)])
                self.writer = self.open(first if earlier else None)
                if self.text is not None and not earlier:
                    self.writer.add_text(HYPERPARAMETERS_TAG, self.text)
            for step, episode_return, length in self.pending.take():
                self.writer.add_scalar(EPISODE_TAGS[0], episode_return, step)
                self.writer.add_scalar(EPISODE_TAGS[1], length, step)
            for tag, value in points:
                self.writer.add_scalar(tag, value, timesteps)
            self.writer.flush()
        except (OSError, ImportError, RuntimeError, ValueError) as e:  # IOError from the writer's thread included
            self.failed = True
            self.pending.take()
            self.log(f"TensorBoard scalars not written ({self.log_dir}): {e}")

    def open(self, purge_step: int | None) -> Any:
        # 0.4 s to import: at the first point, not in the startup
        from torch.utils.tensorboard import SummaryWriter

        before = set(threading.enumerate())
        writer = SummaryWriter(log_dir=self.log_dir, purge_step=purge_step)  # a file of its own: time.host.pid.n
        _WRITER_THREADS.update(t for t in set(threading.enumerate()) - before if type(t).__module__.startswith("tensorboard."))
        if not getattr(threading.excepthook, "kuberl_writer_threads", False):
            threading.excepthook = _writer_thread_hook(threading.excepthook)
        return writer

    def close(self) -> None:
        if self.pending.kept and not self.failed:  # episodes that ended after the last progress line
            self.put(self.pending.kept[-1][0], [])
        if self.writer is not None and not self.failed:  # a failed writer was said once already
            try:
                self.writer.close()
            except (OSError, RuntimeError, ValueError) as e:
                self.log(f"TensorBoard scalars not closed ({self.log_dir}): {e}")
        self.writer = None
