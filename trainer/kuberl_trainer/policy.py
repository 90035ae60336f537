"""Use a trained model: `load_policy(path)` gives a callable `obs -> action`.

    from kuberl_trainer.policy import load_policy
    policy = load_policy("runs/cartpole-ppo")          # a run directory, final-model.pt or a ckpt-*.pt
    env = gymnasium.make(policy.env_id, **policy.env_kwargs)
    obs, _ = env.reset(seed=0)
    obs, reward, terminated, truncated, _ = env.step(policy(obs))

The policy acts by the protocol of the trainer's evaluation (`kuberl_trainer.evaluation`), the one
`status.progress.evalReturn` reports: PPO samples its categorical (seeded, apart from the caller's
torch RNG: the same returns in distribution, not draw for draw) and takes the mean of its Gaussian,
clipped to the action bounds; SAC its squashed mean, TD3 its actor's action; DQN takes the argmax of Q (both the same returns as the trainer's for
the same seed, as tests/unit/test_trainer_policy.py checks). `sample=False` makes PPO's discrete policy greedy too. Observation normalisation, where
the job trained with it, is applied inside. It takes one observation or a batch (leading axis).
For Atari the observation is the preprocessed frame stack `(stack, 84, 84)` uint8 that
`kuberl_trainer.envs.make_envs` (and `env_for`) produce: the caller keeps the stack. A recurrent
policy (spec.ppo.lstm) carries its LSTM state from call to call, one per observation of the batch:
call `policy.reset()` where an episode starts (`evaluate`, `play` and `record` do); every other
policy keeps no state between calls. A Discrete, MultiDiscrete, Dict or Tuple observation is read flattened,
as they produce it too (`gymnasium.spaces.flatten(env.observation_space, obs)`).

## The final model file (`final-model.pt`, format 1)

A `torch.save` of one dict, loadable with `torch.load(path, weights_only=True)`:

| key | value |
| --- | --- |
| `format` | 1 (absent in files written before the format was numbered: read the same) |
| `algorithm` | `"ppo"`, `"dqn"`, `"sac"` or `"td3"` |
| `env_id`, `env_kwargs` | the job's `spec.env.id` and `spec.env.kwargs` (`env_kwargs` absent before format 1: `{}`) |
| `agent` | the network's `state_dict` (PPO: `ppo.Agent`, actor and critic; DQN: the online Q network; SAC: the actor, `sac.Actor`; TD3: the actor, `td3.Actor`) |
| `hidden_sizes` | the MLP's hidden widths (unused for pixel observations, where the Nature CNN is the torso) |
| `lstm_hidden_size` | PPO only: the LSTM's width of a recurrent policy (`spec.ppo.lstm.hiddenSize`), or None (absent in files written before it: None) |
| `obs_norm` | PPO only: `{mean, var, count}` tensors of the observation normaliser, or None |
| `timesteps`, `eval_return` | the run's timesteps and last evaluation return (None if never evaluated); in `best-model.pt`, the same file written at the run's best evaluation, those of that evaluation |

The network is rebuilt from the env's spaces as the trainer builds it (`policy: auto` picks the same
torso any valid forced one would). A checkpoint (`ckpt-*.pt`) holds the same weights inside the
trainer's full state; read through `checkpoint.read`, it needs the run's `job.yaml` for the rest.
"""

from __future__ import annotations

import copy
import glob
import itertools
import json
import math
import os
import re
import sys
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from kuberl.core import fingerprint, names, outputfile, safetext
from kuberl.core.contract import shown_return
from kuberl.core.envspaces import flat_dtype, is_image
from kuberl.core.installhint import with_this_pip
from kuberl.core.rundirs import RUN_JOB_FILE, missing_run_hint, runs_in
from kuberl.core.runrecords import (
    job_of,
    read_regular_file,
    recorded_learned_values,
    run_labels,
    seed_order,
    values_apart,
)
from kuberl.core.yamlreader import UnreadableSpec, load_documents
from torch import nn

from . import checkpoint, evaluation, networks, recurrent
from .atari import install_extra
from .continuous import BOX_BUFFERS
from .envs import FLATTENED, UnknownEnv, make_envs
from .normalize import RunningMeanStd

FORMAT = 1
FINAL_MODEL = "final-model.pt"


class UnusableModel(ValueError):
    """A path that holds no model this module can load; the message says what to give instead."""


class CustomTrainerRun(UnusableModel):
    """A run of a `trainer: custom` job: its script saves what it saves, kuberl no model; several runs scored (`kuberl
    eval runs`) leave it out with a note, as it is no failed run."""


# --- finding and reading the model ------------------------------------------------


def _run_job(run_dir: str) -> dict:
    """The job a `kuberl run` directory ran (its job.yaml), read by the spec's own safe reader."""
    from kuberl.core.rules import defaulted

    spec = _run_spec(run_dir)
    if spec.algorithm is None:
        raise CustomTrainerRun(f"{run_dir}: a custom trainer's run; kuberl cannot load its model")
    return defaulted(spec)


def _run_spec(run_dir: str) -> Any:
    """The validated spec of a `kuberl run` directory's job.yaml; UnusableModel when it cannot be read."""
    from kuberl.core.rules import validate_job
    from kuberl.core.validation import InvalidJob
    from kuberl.core.yamlreader import UnreadableSpec, load_documents

    path = os.path.join(run_dir, "job.yaml")
    try:
        with open(path, "rb") as f:
            docs = load_documents(f)
        spec = validate_job(docs[0])
    except (OSError, IndexError, InvalidJob, UnreadableSpec) as e:
        raise UnusableModel(f"{path}: cannot read the run's job: {e}") from None
    return spec


def _modified(path: str) -> float:
    """When `path` itself last changed, a link's own time (-inf once gone): a run directory is anyone's to fill, and a
    dangling best-model.pt or final-model.pt link ended kuberl eval in a FileNotFoundError traceback; the file
    itself is then refused as it is read (checkpoint.read_model: a regular file, bounded)."""
    try:
        return os.lstat(path).st_mtime
    except OSError:  # removed since it was listed: a live run's checkpoint rotation
        return -math.inf


def find_model(path: str, best: bool = False) -> str:
    """The file to load for `path`: itself, or in a run directory its final model (the last weights), else its
    newest valid checkpoint (a run stopped before the end); with `best`, the run's best-model.pt (the weights of
    its best evaluation)."""
    if best:
        if not os.path.isdir(path):
            raise UnusableModel(f"--best: {path} is a file; --best picks {names.BEST_MODEL} of a run directory (or give that file)")
        found = sorted(glob.glob(os.path.join(glob.escape(path), "checkpoints", "*", names.BEST_MODEL)), key=_modified)
        if not found:
            raise UnusableModel(f"--best: {path} has no {names.BEST_MODEL}: the run has not evaluated yet (evaluations run every"
                                " success.evalEvery updates)")
        return found[-1]
    if not os.path.isdir(path):
        if not os.path.exists(path):
            raise UnusableModel(f"{path}: no such file or directory{missing_run_hint(path)}")
        if path.lower().endswith((".yaml", ".yml", ".json")):  # `kuberl eval job.yaml`: it answered "not a torch.save zip"
            raise UnusableModel(f"{path}: a job file, not a model: give the run directory kuberl run trained it in,"
                                f" {job_run_dir(path)}")
        return path
    finals = sorted(glob.glob(os.path.join(glob.escape(path), "checkpoints", "*", FINAL_MODEL)), key=_modified)
    if finals:
        return trained_on_after(finals[-1]) or finals[-1]
    for directory in sorted(glob.glob(os.path.join(glob.escape(path), "checkpoints", "*")), key=_modified, reverse=True):
        newest = checkpoint.load_newest(directory)  # the newest that is valid, as a resumed run takes it
        if newest is not None:
            return newest[0]
    if os.path.isfile(os.path.join(path, "job.yaml")):  # a run of kuberl run's that saved nothing: say how it ended
        try:
            custom = _run_spec(path).algorithm is None
        except UnusableModel:
            custom = False
        if custom:  # it was answered "saved no final-model.pt (it was stopped before its first checkpoint)"
            raise CustomTrainerRun(f"{path}: a trainer: custom run: its own script saves what it learns, kuberl keeps no"
                                   " model of it to play")
        raise UnusableModel(f"{path}: this run saved no {FINAL_MODEL} and no checkpoint ({run_ending(path)}); logs in"
                            f" {os.path.join(path, 'logs')}")
    runs = runs_in(path)
    if runs:  # `kuberl eval runs`: kuberl run's --dir, not one of its runs
        raise UnusableModel(f"{path} holds runs, not one run: give one of them ({', '.join(runs[:4])}{', …' if len(runs) > 4 else ''})")
    raise UnusableModel(f"{path}: no {FINAL_MODEL} and no checkpoint under checkpoints/ (give a run directory of kuberl run,"
                        f" a {FINAL_MODEL} or a ckpt-*.pt)")


def trained_on_after(final_model: str) -> str | None:
    """The newest valid checkpoint beside `final_model` when it is newer: a run ends by writing its final model
    and saves no checkpoint after it, so a later one means training went on (a `kuberl run --resume` that raised
    totalTimesteps, then stopped) and the final model is the older weights; else None."""
    written = _modified(final_model)
    directory = os.path.dirname(final_model)
    if not any(_modified(p) > written for p in glob.glob(os.path.join(glob.escape(directory), "ckpt-*.pt"))):
        return None
    newest = checkpoint.load_newest(directory)
    return newest[0] if newest is not None and _modified(newest[0]) > written else None


def run_ending(run_dir: str) -> str:
    """How a run of kuberl run ended, from its status.json (bounded): `Failed: ConfigError: …`, `stopped`, or what
    is known."""
    # a regular file only, bounded: a shared runs/ is anyone's to write, and a FIFO there hung `kuberl eval runs`
    text = read_regular_file(os.path.join(run_dir, "status.json"), 1 << 20)
    try:
        status = json.loads(text) if text else None
    except (ValueError, RecursionError):  # 1 MiB of "[" nests deeper than json decodes
        return "no status recorded"
    if not isinstance(status, dict) or not isinstance(status.get("conditions") or [], list):
        return "no status recorded"
    phase = status.get("phase")
    failed = [c for c in status.get("conditions") or [] if isinstance(c, dict) and c.get("type") == "Failed" and c.get("status") == "True"]
    if phase == "Failed" and failed:
        return f"it failed: {failed[0].get('reason')}: {str(failed[0].get('message'))[:300]}"
    return {"Suspended": "it was stopped before its first checkpoint"}.get(phase, f"its phase: {phase}")


def job_run_dir(job_file: str) -> str:
    """runs/<job> of a job file, as `kuberl run` names it (--dir's default), read the one safe way."""
    try:
        with open(job_file, "rb") as f:
            documents = load_documents(f.read(1 << 20))
    except (OSError, UnreadableSpec):
        documents = []
    names = [d["metadata"]["name"] for d in documents if isinstance(d, dict) and d.get("kind") == "RLTrainingJob"
             and isinstance(d.get("metadata"), dict) and isinstance(d["metadata"].get("name"), str)]
    return f"runs/{names[0]}" if len(names) == 1 else "runs/<job>"


def _run_dir_of(model_path: str) -> str | None:
    """runs/<job>/ for runs/<job>/checkpoints/<job>-<uid>/<file>, when its job.yaml is there."""
    run_dir = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(model_path))))
    return run_dir if os.path.exists(os.path.join(run_dir, "job.yaml")) else None


def read_model(path: str) -> dict:
    """The model dict (format above) of a final model or a checkpoint, each read the safe way
    (`checkpoint.read_model`, `checkpoint.read`: bounded, no code run)."""
    if checkpoint.NAME.match(os.path.basename(path)):
        try:
            state = checkpoint.read(path)
        except (ValueError, OSError) as e:
            raise UnusableModel(f"{path}: {e}") from None
        run_dir = _run_dir_of(path)
        if run_dir is None:
            raise UnusableModel(f"{path}: a checkpoint is loaded with its run's job.yaml (give the run directory)")
        spec = _run_job(run_dir)
        if (refused := trained_as_refusal(state, spec)) is not None:
            raise UnusableModel(f"{path}: {refused}")
        norm = state.get("obs_norm") if spec["algorithm"] == "ppo" and spec["ppo"]["normalizeObservation"] else None
        return {"format": FORMAT, "algorithm": spec["algorithm"], "env_id": spec["env"]["id"],
                "env_kwargs": spec["env"]["kwargs"], "agent": state["agent"],
                "hidden_sizes": spec[spec["algorithm"]]["hiddenSizes"], "obs_norm": norm,
                "lstm_hidden_size": (spec["ppo"].get("lstm") or {}).get("hiddenSize") if spec["algorithm"] == "ppo" else None,
                "timesteps": (state.get("counters") or {}).get("global_step"), "eval_return": None}
    try:
        model = checkpoint.read_model(path)
    except (ValueError, OSError) as e:
        raise UnusableModel(f"{path}: {e}") from None
    missing = [k for k in ("algorithm", "env_id", "agent", "hidden_sizes") if k not in model]
    if missing or not isinstance(model.get("format", FORMAT), int) or model.get("format", FORMAT) > FORMAT:
        raise UnusableModel(f"{path}: not a kuberl final model of format {FORMAT}"
                            + (f" (missing {', '.join(missing)})" if missing else f" (format {safetext.one_line(repr(model.get('format')))[:80]})"))
    model = {"env_kwargs": {}, "obs_norm": None, **model}
    wrong = _model_problem(model)
    if wrong:
        raise UnusableModel(f"{path}: not a kuberl final model: {wrong}")
    return model


def trained_as_refusal(state: dict, spec: dict) -> str | None:
    """Why a checkpoint's weights cannot be played on its run's job.yaml (None: they can), as a resume refuses
    them (session.TrainingSession): the checkpoint records the env, algorithm and observation normalisation
    it was trained with (trained_as), and job.yaml may have been edited since. Refused, naming both, with no
    override: eval plays job.yaml's env, so CartPole weights played on an edited env id (or with their
    normaliser dropped) would print a return that describes neither. A checkpoint from before trained_as
    passes unchecked, as a resume takes it."""
    from .session import describe_trained_as, trained_as_problem

    recorded = state.get("trained_as")
    if recorded is None:
        return None
    if (wrong := trained_as_problem(recorded)) is not None:
        return f"its {wrong}"
    own = {"algorithm": spec["algorithm"], "env": spec["env"]["id"],
           "normalizeObservation": bool(spec["algorithm"] == "ppo" and spec["ppo"]["normalizeObservation"])}
    if recorded == own:
        return None
    return (f"trained on {describe_trained_as(recorded)}, but its run's job.yaml is {describe_trained_as(own)}"
            " (edited since?): evaluate it with the job.yaml it was trained with, or the run's final-model.pt")


def final_model_mismatch(path: str) -> str | None:
    """How a final model in a run of `kuberl run` differs from that run's job.yaml in what its weights mean (the
    algorithm, the env, observation normalisation: a checkpoint's trained_as), said naming both; None when they
    agree, when `path` is no final model or lies in no run. A final model names its own env and plays there, but
    `kuberl eval RUN_DIR` asks for the run's job: a model left from another env or algorithm (a --resume onto an
    edited spec stopped before its end, a copied file, an edited job.yaml) was scored on its own env, silently."""
    from .session import describe_trained_as

    if os.path.basename(path) != FINAL_MODEL or (run_dir := _run_dir_of(path)) is None:
        return None
    model, spec = read_model(path), _run_job(run_dir)
    found = {"algorithm": model["algorithm"], "env": model["env_id"], "normalizeObservation": model["obs_norm"] is not None}
    own = {"algorithm": spec["algorithm"], "env": spec["env"]["id"],
           "normalizeObservation": bool(spec["algorithm"] == "ppo" and spec["ppo"]["normalizeObservation"])}
    if found == own:
        return None
    return (f"{_shown(path)} was trained on {describe_trained_as(found)}, but its run's job.yaml is"
            f" {describe_trained_as(own)}")


def _model_problem(model: dict) -> str | None:
    """What in a final model's dict is not what the trainer writes (a spec's values, a state_dict of tensors):
    a file is anyone's, and these values choose what is imported, made and allocated."""
    from kuberl.core.validation import ENV_ID

    if model["algorithm"] not in ("ppo", "dqn", "sac", "td3"):
        return f"algorithm {safetext.one_line(repr(model['algorithm']))[:80]} (ppo, dqn, sac or td3)"
    env_id = model["env_id"]
    if not isinstance(env_id, str) or len(env_id) > 253 or not re.fullmatch(ENV_ID, env_id):
        return f"env_id {safetext.one_line(repr(env_id))[:80]} is no spec.env.id"
    kwargs = model["env_kwargs"]
    if not isinstance(kwargs, dict) or len(kwargs) > 64 or not all(isinstance(k, str) for k in kwargs):
        return "env_kwargs is no spec.env.kwargs (a map of at most 64 names)"
    widths = model["hidden_sizes"]
    if (not isinstance(widths, list) or not 1 <= len(widths) <= 8
            or not all(type(w) is int and 1 <= w <= 65536 for w in widths)):  # the spec's hiddenSizes
        return "hidden_sizes is no list of 1 to 8 widths from 1 to 65536"
    agent = model["agent"]
    if not isinstance(agent, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in agent.items()):
        return "agent is no state_dict (names to tensors)"
    norm = model["obs_norm"]
    if norm is not None and (not isinstance(norm, dict) or set(norm) != {"mean", "var", "count"}):
        return "obs_norm is neither None nor {mean, var, count}"
    lstm = model.get("lstm_hidden_size")
    if lstm is not None and not (model["algorithm"] == "ppo" and type(lstm) is int and 1 <= lstm <= 4096):
        return "lstm_hidden_size is neither None nor a PPO policy's spec.ppo.lstm.hiddenSize (1 to 4096)"
    return None


def _obs_norm_problem(norm: dict, shape: tuple[int, ...]) -> str | None:
    """Why a model's observation normaliser does not fit the env's observations (its mean and var
    arrays of the observation's shape, its count one number)."""
    for key in ("mean", "var"):
        value = norm[key]
        if not isinstance(value, (torch.Tensor, np.ndarray)) or tuple(value.shape) != shape:
            return f"{key} is not an array of the observation's shape {list(shape)}"
    count = norm["count"]
    if isinstance(count, (torch.Tensor, np.ndarray)) and count.ndim == 0:
        count = count.item()
    if type(count) not in (int, float) or not 0 <= count < float("inf"):
        return "count is not a finite, non-negative number"
    return None


def env_module_problem(env_id: str, allowed: Collection[str]) -> str | None:
    """Why a model's "module:Class" env id may not be made here: making it imports `module` and calls `Class`
    with the model's env_kwargs (`subprocess:Popen` with args runs any command), and a model file or a run
    directory is anyone's. Only a module the user names (`--allow-env-module`) is imported."""
    if ":" not in env_id:
        return None  # a registered gymnasium id: its entry point is the installed package's
    module = env_id.partition(":")[0]
    if any(module == name or module.startswith(name + ".") for name in allowed):
        return None
    return (f"env id {env_id!r} would import {module!r} and call what it names with the model's env_kwargs;"
            f" a model file can name any module, so kuberl eval imports one only when told: --allow-env-module {module}"
            " if you trust it")


# --- the policy --------------------------------------------------------------------


def build_network(model: dict, obs_space: gym.Space, action_space: gym.Space) -> nn.Module:
    """The trainer's network for these spaces, with the model's weights."""
    from .dqn import QNetwork
    from .ppo import Agent, RecurrentAgent
    from .sac import Actor
    from .td3 import Actor as TD3Actor

    hidden = [int(w) for w in model["hidden_sizes"]]
    cnn = networks.choose(obs_space, "auto", "policy") == "cnn"
    # The network must hold exactly the file's weights: one whose hidden layers alone need more is refused
    # before it is built (hidden_sizes [65536] * 8 is 120 GB of float32 for a file of a few bytes).
    weights = sum(t.numel() for t in model["agent"].values() if isinstance(t, torch.Tensor))
    needed = 0 if cnn else sum(a * b for a, b in itertools.pairwise(hidden)) + sum(hidden)
    lstm = model.get("lstm_hidden_size")
    if model["algorithm"] == "ppo" and lstm is not None:  # its LSTM's too: 4096 wide is 67 million weights, 36 s to make
        needed += recurrent.parameters_of(lstm, networks.encoder_width(obs_space, "auto", "policy"))
    if needed > weights:
        lstm_named = f" and lstm_hidden_size {lstm}" if model["algorithm"] == "ppo" and lstm is not None else ""
        raise UnusableModel(f"hidden_sizes {hidden}{lstm_named} need more weights than the model holds ({weights:,})")
    if model["algorithm"] == "ppo" and lstm is not None:
        encoder, features = networks.encoder(obs_space, "auto", "policy")
        network: nn.Module = RecurrentAgent(features, action_space, [] if cnn else hidden, lstm, encoder)
    elif model["algorithm"] == "ppo":
        encoder, features = networks.encoder(obs_space, "auto", "policy")
        network = Agent(features, action_space, [] if cnn else hidden, encoder)
    elif model["algorithm"] == "dqn":
        n = int(action_space.n)
        network = networks.QCNN(tuple(obs_space.shape), n) if cnn else QNetwork(math.prod(obs_space.shape), n, hidden)
    elif model["algorithm"] == "sac" and isinstance(action_space, gym.spaces.Box):
        bounds = (torch.as_tensor(action_space.low), torch.as_tensor(action_space.high))  # host: the loaded policy runs on the CPU
        network = Actor(math.prod(obs_space.shape), *bounds, hidden)
    elif model["algorithm"] == "td3" and isinstance(action_space, gym.spaces.Box):
        bounds = (torch.as_tensor(action_space.low), torch.as_tensor(action_space.high))  # host: the loaded policy runs on the CPU
        network = TD3Actor(math.prod(obs_space.shape), *bounds, hidden)
    else:
        raise UnusableModel(f"unknown algorithm {model['algorithm']!r} for {action_space}")
    if (problem := weights_problem(model, network)) is not None:
        raise UnusableModel(f"the weights do not fit {model['env_id']}'s {model['algorithm']} network: {problem}")
    box = {name: value.clone() for name, value in network.named_buffers() if name in BOX_BUFFERS}
    try:
        network.load_state_dict(model["agent"])
    except (RuntimeError, KeyError, TypeError) as e:
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]  # the first says only "Error(s) in ..."
        detail = safetext.one_line(lines[1] if len(lines) > 1 else lines[0] if lines else type(e).__name__)[:300]
        raise UnusableModel(f"the weights do not fit {model['env_id']}'s {model['algorithm']} network: {detail}") from None
    for name, made in box.items():
        if not torch.allclose(network.get_buffer(name).double(), made.double(), rtol=1e-5, atol=1e-6):
            raise UnusableModel(f"the weights' {name} is not {model['env_id']}'s action box's (trained on another"
                                " box, or edited): its actions would not be the env's")
    return network.eval()


NAMES_SHOWN = 3  # a state_dict's names named in a refusal at most


def weights_problem(model: dict, network: nn.Module) -> str | None:
    """Why a model's weights (a state_dict from a file, anyone's) cannot be the network's: names it lacks or has
    beyond the network's (a SAC actor's weights in a file that says td3: torch's refusal named none of them in its
    first line, all kuberl eval showed), a weight of no real floating type (complex, integer, bool: load_state_dict
    casts them), or a weight that is NaN or infinite (it played NaN actions, a NaN return)."""
    agent, own = model["agent"], network.state_dict()
    missing, extra = [n for n in own if n not in agent], [n for n in agent if n not in own]
    if missing or extra:
        def named(names: list[str]) -> str:
            shown = ", ".join(safetext.one_line(n)[:80] for n in names[:NAMES_SHOWN])
            return shown + (f" and {len(names) - NAMES_SHOWN} more" if len(names) > NAMES_SHOWN else "")
        return "; ".join([*([f"missing {named(missing)}"] if missing else []), *([f"not its own {named(extra)}"] if extra else [])]
                         ) + " (a model of another algorithm, or edited?)"
    for name, value in agent.items():
        if own[name].is_floating_point() and not value.is_floating_point():  # load_state_dict would cast it in silence
            return f"{safetext.one_line(name)[:80]} holds {value.dtype} values, not real floating point (edited?)"
        if value.is_floating_point() and value.shape == own[name].shape and not bool(torch.isfinite(value).all()):
            return f"{safetext.one_line(name)[:80]} holds NaN or infinite values (a run that diverged, or edited)"
    return None


@dataclass
class Policy:
    """`policy(obs) -> action`, acting as the trainer's evaluation does (module docstring)."""

    network: nn.Module
    algorithm: str
    env_id: str
    env_kwargs: dict
    observation_space: gym.Space
    action_space: gym.Space
    obs_norm: RunningMeanStd | None = None
    sample: bool = True
    seed: int = 0
    timesteps: int | None = None
    eval_return: float | None = None
    state: tuple[torch.Tensor, torch.Tensor] | None = None  # a recurrent policy's, per observation of the batch
    _rng: torch.Tensor = field(init=False, repr=False)

    def __post_init__(self) -> None:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            self._rng = torch.get_rng_state()

    @property
    def discrete(self) -> bool:
        return isinstance(self.action_space, gym.spaces.Discrete)

    @property
    def recurrent(self) -> bool:
        return isinstance(getattr(self.network, "lstm", None), nn.Module)

    def reset(self) -> None:
        """Where an episode starts: a recurrent policy's next call begins from a fresh state (others keep none)."""
        self.state = None

    def __call__(self, obs: Any) -> np.ndarray:
        x = np.asarray(obs)
        single = x.shape == tuple(self.observation_space.shape)
        if single:
            x = x[None]
        if self.obs_norm is not None:
            x = self.obs_norm.normalize(x)
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            torch.set_rng_state(self._rng)
            # uint8 stays uint8 for the CNN only (it scales frames itself); an MLP reads floats, as the trainer gave it
            frames = x.dtype == np.uint8 and is_image(self.observation_space)
            t = torch.as_tensor(x) if self.algorithm == "dqn" or frames else torch.as_tensor(x, dtype=torch.float32)  # host: the loaded policy runs on the CPU
            if self.recurrent:
                if self.state is None or self.state[0].shape[0] != len(t):
                    self.state = self.network.lstm.zero_state(len(t), torch.device("cpu"))
                if self.discrete and self.sample:
                    action, _, _, self.state = self.network.act(t, self.state)
                else:
                    action, self.state = self.network.greedy(t, self.state)
            elif self.algorithm == "dqn":
                action = self.network.greedy(t)
            elif self.discrete and self.sample:
                action = self.network.act(t)[0]
            else:
                action = self.network.greedy(t)
            self._rng = torch.get_rng_state()
        out = action.numpy()
        if not self.discrete:
            out = np.clip(out, self.action_space.low, self.action_space.high)
        return out[0] if single else out


def load_policy(path: str, sample: bool = True, seed: int = 0, env_modules: Collection[str] = ()) -> Policy:
    """A run directory, a final model or a checkpoint as a `Policy` (module docstring). The job's env is
    made once (as the trainer makes it) for its spaces; raises UnusableModel saying what is wrong. A
    "module:Class" env is made only when `env_modules` names its module (`env_module_problem`)."""
    source = find_model(path)
    if os.path.isdir(path) and (mismatch := final_model_mismatch(source)) is not None:
        raise UnusableModel(f"{mismatch}: load the file itself to play it on its own env")
    model = read_model(source)
    refused = env_module_problem(model["env_id"], env_modules)
    if refused:
        raise UnusableModel(refused)
    envs = make_envs(model["env_id"], 1, model["env_kwargs"])
    try:
        obs_space, action_space = envs.single_observation_space, envs.single_action_space
    finally:
        envs.close()
    norm = None
    if model.get("obs_norm") is not None:
        wrong = _obs_norm_problem(model["obs_norm"], tuple(obs_space.shape))
        if wrong:
            raise UnusableModel(f"obs_norm {wrong}")
        norm = RunningMeanStd(tuple(obs_space.shape))
        norm.load_state_dict({k: np.asarray(v) if k != "count" else float(v) for k, v in model["obs_norm"].items()})
    return Policy(build_network(model, obs_space, action_space), model["algorithm"], model["env_id"], dict(model["env_kwargs"]),
                  obs_space, action_space, norm, sample, seed, model.get("timesteps"), model.get("eval_return"))


# --- playing it ------------------------------------------------------------------


# `kuberl eval`'s default bound on an episode's steps, the trainer's evaluation's: a "max_episode_steps" of 10**9 in
# spec.env.kwargs with a policy that never fails (Pendulum never ends by itself) played on without end.
MAX_EVAL_STEPS = evaluation.MAX_EPISODE_STEPS


def evaluate(policy: Policy, episodes: int, seed: int = 0, max_steps: int | None = None) -> np.ndarray:
    """The return of each of `episodes` episodes, by the trainer's own protocol (`evaluation.returns`);
    `max_steps`: see `play`."""
    return play(policy, episodes, seed, max_steps)[0]


def play(policy: Policy, episodes: int, seed: int = 0, max_steps: int | None = None,
         progress: Callable[[np.ndarray, np.ndarray], None] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """`evaluate`'s returns, and which episodes were still running after `max_steps` steps (their returns
    count those steps only; None: each episode to its end, however long the env lets it run). `progress`: told as
    episodes end (EpisodeProgress)."""
    envs = make_envs(policy.env_id, episodes, policy.env_kwargs)
    policy.reset()  # each copy's first episode, the one counted, from a fresh state
    try:
        return evaluation.play(envs, policy, episodes, seed, max_steps, ended=progress)
    finally:
        envs.close()


PROGRESS_EVERY_SECONDS = 5.0  # as training's progress lines: a quick evaluation says only its result


class EpisodeProgress:
    """`kuberl eval`'s progress while its episodes play (Atari's take minutes): a line on `log` as more episodes have
    ended, at most one each PROGRESS_EVERY_SECONDS, as training's progress lines come: episodes ended of all, the mean
    return of those, seconds since the start."""

    def __init__(self, episodes: int, log: Callable[[str], None], clock: Callable[[], float] = time.monotonic):
        self.episodes, self.log, self.clock = episodes, log, clock
        self.started = self.said_at = clock()
        self.said = 0  # the episodes ended as of the last line

    def __call__(self, returns: np.ndarray, running: np.ndarray) -> None:
        done, now = int((~running).sum()), self.clock()
        if done == self.said or done == self.episodes or now - self.said_at < PROGRESS_EVERY_SECONDS:
            return  # the result line says the last of them
        self.said, self.said_at = done, now
        self.log(f"episodes {done}/{self.episodes}  mean return {shown_return(float(returns[~running].mean()))}"
                 f"  {now - self.started:.0f}s")


def env_for(policy: Policy, render_mode: str | None = None) -> gym.Env:
    """One env of the job, preprocessed as the trainer's (a frame stack for Atari), rendering when asked."""
    from . import atari
    from .envs import resolve_env

    kwargs = dict(policy.env_kwargs)
    if atari.is_atari(policy.env_id):
        opts = atari.options(kwargs)
        if render_mode:
            opts = atari.AtariOptions(**{**vars(opts), "make_kwargs": {**opts.make_kwargs, "render_mode": render_mode}})
        return atari.make_one(atari.game_of(policy.env_id), opts)
    target = resolve_env(policy.env_id)
    if render_mode:
        kwargs["render_mode"] = render_mode
    env = gym.make(target, **kwargs) if isinstance(target, str) else target(**kwargs)
    # the observation the policy reads, as make_envs gives it (envs.flatten_observations)
    if not isinstance(env.observation_space, FLATTENED):
        return env
    return gym.wrappers.DtypeObservation(gym.wrappers.FlattenObservation(env), flat_dtype(env.observation_space))


MAX_VIDEO_FRAMES = 5000  # `kuberl eval --video`'s: CartPole's longest episode is 500


def record(policy: Policy, path: str, seed: int = 0, max_frames: int = MAX_VIDEO_FRAMES, fps: int = 30,
           log: Callable[[str], None] = print) -> tuple[float, int, bool]:
    """Play one episode and write its frames to `path` as an animated GIF (Pillow: the `video` extra), at most
    `max_frames` of them. Returns (the return of the frames written, frames written, whether the episode ended)."""
    try:
        from PIL import Image
    except ImportError:
        raise UnusableModel(f"--video needs Pillow: {install_extra('video')}") from None
    if not path.lower().endswith(".gif"):
        raise UnusableModel(f"--video {path}: only .gif is written")
    # frames need no display: SDL (pygame, classic control's renderer) probing for one printed
    # "error: XDG_RUNTIME_DIR is invalid or not set" on a machine without a desktop session
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    if sys.platform == "linux" and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        # MuJoCo's default, GLFW, needs a display: without one it draws off-screen through EGL (read when it first draws)
        os.environ.setdefault("MUJOCO_GL", "egl")
    try:
        env = env_for(policy, "rgb_array")
    except TypeError as e:
        if "render_mode" not in str(e):
            raise
        # a class of the user's own ("module:Class") that never asked for frames: gymnasium asks by this argument
        raise UnusableModel(f"--video: {policy.env_id} takes no render_mode ({e}): gymnasium asks an env for its frames"
                            " with render_mode=\"rgb_array\" to its constructor, and reads them from render()") from None
    frames, total, ended = GifFrames(Image), 0.0, False
    policy.reset()
    try:
        obs, _ = env.reset(seed=seed)
        for _ in range(max_frames):
            try:
                frame = env.render()
            except gym.error.DependencyNotInstalled as e:  # classic control draws with pygame: the video extra
                raise UnusableModel(f"--video: {policy.env_id} cannot draw its frames here ({with_this_pip(str(e), sys.executable)});"
                                    f" {install_extra('video')}") from None
            except Exception as e:  # noqa: BLE001 — an OpenGL env without a context here (mujoco.FatalError), a renderer's own failure
                raise UnusableModel(f"--video: {policy.env_id} cannot draw its frames here ({type(e).__name__}: {e})") from None
            if frame is None:
                raise UnusableModel(f"{policy.env_id} renders no rgb_array frames: no video")
            frames.add(np.asarray(frame, dtype=np.uint8))
            obs, reward, terminated, truncated, _ = env.step(policy(obs))
            total += float(reward)
            if terminated or truncated:
                ended = True
                break
    finally:
        env.close()
    count = len(frames)
    images = frames.images()
    next(images).save(path, save_all=True, append_images=images, duration=max(1, round(1000 / fps)), loop=0)
    return total, count, ended


class GifFrames:
    """An episode's frames as a GIF holds them, one byte a pixel, made as each frame arrives: kept as RGB until
    the end, 5,000 CartPole frames held 3.6 GB. While the episode has at most 256 colours (CartPole's 234, Atari's
    NTSC palette of 128) a frame is kept as indices into the colours seen so far, and every frame is written
    against one exact palette of them, in colour order; past 256 colours (or a frame not RGB) each frame is
    converted as Pillow's GIF writer converts it: quantised alone (35 ms a 600x400 frame)."""

    def __init__(self, Image: Any):
        self.Image = Image
        self.held: list = []  # index arrays while exact, else Pillow images
        self.exact = True
        self.seen = np.zeros(1 << 24, dtype=bool)
        self.index = np.zeros(1 << 24, dtype=np.uint8)  # a colour's index in arrival order, read where seen
        self.colours: list[int] = []

    def __len__(self) -> int:
        return len(self.held)

    def add(self, frame: np.ndarray) -> None:
        if self.exact and (frame.ndim != 3 or frame.shape[2] != 3 or not self._index(frame)):
            self._give_up_exactness()
        if not self.exact:
            self.held.append(self._pillows(frame))

    def _index(self, frame: np.ndarray) -> bool:
        """Keep `frame` as indices; False (nothing kept) where it brings the episode past 256 colours."""
        key = frame[..., 0].astype(np.uint32) << 16 | frame[..., 1].astype(np.uint32) << 8 | frame[..., 2]
        known = self.seen[key]
        if not known.all():
            new = np.unique(key[~known])
            if len(self.colours) + len(new) > 256:
                return False
            self.index[new] = np.arange(len(self.colours), len(self.colours) + len(new), dtype=np.uint8)
            self.seen[new] = True
            self.colours.extend(new.tolist())
        self.held.append(self.index[key])
        return True

    def _pillows(self, frame: np.ndarray) -> Any:
        """The frame as the GIF writer makes it (GifImagePlugin._normalize_mode): RGB quantised alone."""
        image = self.Image.fromarray(frame)
        return image.convert("P", palette=self.Image.Palette.ADAPTIVE) if image.mode == "RGB" else image

    def _give_up_exactness(self) -> None:
        rgb = self._rgb()
        self.held = [self._pillows(rgb[indices]) for indices in self.held]  # one RGB frame at a time
        self.exact, self.seen, self.index = False, None, None

    def _rgb(self) -> np.ndarray:
        colours = np.array(self.colours, dtype=np.uint32)
        return np.stack([colours >> 16, colours >> 8 & 255, colours & 255], axis=1).astype(np.uint8).reshape(-1, 3)

    def images(self) -> Iterator[Any]:
        """The frames as Pillow images, each let go once given (the writer keeps its own copy)."""
        held, self.held = self.held, []
        if not self.exact:
            yield from held
            return
        order = np.argsort(np.array(self.colours, dtype=np.uint32), kind="stable")
        colour_order = np.empty(len(order), dtype=np.uint8)
        colour_order[order] = np.arange(len(order), dtype=np.uint8)  # arrival index -> index in colour order
        palette = self._rgb()[order].ravel().tolist()
        held.reverse()
        while held:
            indices = held.pop()
            image = self.Image.frombytes("P", (indices.shape[1], indices.shape[0]), colour_order[indices].tobytes())
            image.putpalette(palette)
            del indices
            yield image


def gif_frames(frames: Iterable[np.ndarray], Image: Any) -> list:
    """RGB frames as a GIF holds them (GifFrames), all at once."""
    held = GifFrames(Image)
    for frame in frames:
        held.add(frame)
    return list(held.images())


# --- export for serving --------------------------------------------------------------


class _Greedy(nn.Module):
    """The deterministic policy (greedy, or the Gaussian's mean), normalisation inside, for TorchScript."""

    def __init__(self, policy: Policy):
        super().__init__()
        self.network = policy.network
        norm = policy.obs_norm
        self.normalize = norm is not None
        shape = tuple(policy.observation_space.shape)
        self.register_buffer("mean", torch.as_tensor(norm.mean if norm else np.zeros(shape), dtype=torch.float32))  # host: buffers move with the module
        self.register_buffer("std", torch.as_tensor(np.sqrt(norm.var + norm.epsilon) if norm else np.ones(shape), dtype=torch.float32))  # host: buffers move with the module
        self.clip = float(norm.clip) if norm else 0.0
        self.floats = not is_image(policy.observation_space)  # an MLP reads floats; the CNN scales uint8 frames itself

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.float() if self.floats else obs
        if self.normalize:
            x = torch.clamp((x.float() - self.mean) / self.std, -self.clip, self.clip)
        return self.network.greedy(x)


def export_refusal(policy: Policy) -> str | None:
    """Why `policy` is not exported: a recurrent one's actions depend on a state a traced function would not carry."""
    if policy.recurrent:
        return ("--export: a recurrent policy (spec.ppo.lstm) acts from an LSTM state carried between steps,"
                " which a traced obs -> action function would drop; play it with load_policy instead")
    return None


def export_torchscript(policy: Policy, path: str) -> None:
    """Write the deterministic policy (batch of observations -> actions) as TorchScript: load it with
    `torch.jit.load(path)`, no kuberl needed. Continuous actions are the Gaussian's mean, unclipped.
    A recurrent policy is refused (export_refusal)."""
    if (refused := export_refusal(policy)) is not None:
        raise UnusableModel(refused)
    example = torch.as_tensor(np.stack([policy.observation_space.sample()] * 2))  # host: the export traces on the CPU
    if example.dtype != torch.uint8:
        example = example.float()
    # a copy without gradients: the actions of a continuous policy required grad, and `.numpy()` on them raised
    greedy = copy.deepcopy(_Greedy(policy)).eval().requires_grad_(False)
    traced = torch.jit.trace(greedy, example, check_trace=False)
    torch.jit.save(traced, path)


# --- `kuberl eval` ---------------------------------------------------------------------


def _shown(path: str) -> str:
    """`path` relative to here where it is below, escaped to one line: a run directory's name is anyone's to choose
    (`runs/job.<ESC>[2J`, a line break), and `kuberl eval runs` printed each as it was."""
    relative = os.path.relpath(path)
    return safetext.one_line(path if relative.startswith("..") else relative)


def output_problem(flag: str, path: str | None) -> str | None:
    """Why `--video`/`--export` could not be written, said before episodes are played."""
    return outputfile.output_problem(flag, path, ".gif" if flag == "--video" else None)


def runs_to_score(paths: list[str]) -> list[str]:
    """What `kuberl eval` plays: each path given, a directory of runs (kuberl run's --dir, `runs`) as its runs."""
    runs = []
    for path in paths:
        held = runs_in(path) if not os.path.isdir(os.path.join(path, "checkpoints")) else []
        runs += held or [path]
    return runs


def cmd_eval(args: Any) -> int:
    """`kuberl eval RUN_DIR|MODEL.pt... [--episodes N] [--video FILE] [--export FILE]`: one model played, or several
    (runs compared: a directory of runs, or several paths), each scored on the same episodes."""
    refused = output_problem("--video", args.video) or output_problem("--export", args.export)
    if refused:
        print(f"kuberl eval: {refused}", file=sys.stderr)
        return 1
    allowed = getattr(args, "allow_env_module", None) or ()
    if allowed and os.getcwd() not in sys.path:
        # where the run's pods found the module: each started here (kuberl run's directory, with no workingDir) as
        # `python -m`, which puts it on the path; last, so a file here shadows no module installed
        sys.path.append(os.getcwd())
    runs = runs_to_score(args.path if isinstance(args.path, list) else [args.path])
    if len(runs) > 1:
        return score_runs(runs, args, allowed)
    args.path = runs[0]
    try:
        source = find_model(args.path, getattr(args, "best", False))
        if (mismatch := final_model_mismatch(source)) is not None:
            if os.path.isdir(args.path):  # the run was asked for, and this is not its job's model
                raise UnusableModel(f"{mismatch} (not this run's model?): kuberl eval {_shown(source)} plays it on"
                                    " its own env; put back the job.yaml it was trained with to evaluate the run")
            print(f"kuberl eval: note: {mismatch}: playing it on its own env", file=sys.stderr)
        policy = load_policy(source, seed=args.seed, env_modules=allowed)
        if args.export and (refused := export_refusal(policy)) is not None:  # before the episodes, not after them
            raise UnusableModel(refused)
        max_steps = getattr(args, "max_steps", None) or MAX_EVAL_STEPS
        progress = EpisodeProgress(args.episodes, lambda line: print(line, file=sys.stderr, flush=True))
        returns, cut = play(policy, args.episodes, args.seed, max_steps, progress)
        trained = f"{policy.timesteps:,} timesteps" if isinstance(policy.timesteps, int) else "timesteps unknown"
        print(f"{policy.env_id}: mean return {shown_return(float(returns.mean()))} ± {shown_return(float(returns.std()))}"
              f" over {args.episodes} episode(s)"
              f" ({policy.algorithm}, {trained}; model {_shown(source)})")
        if cut.any():
            print(f"kuberl eval: warning: {int(cut.sum())} of {args.episodes} episode(s) had not ended after --max-steps"
                  f" {max_steps:,} steps: their returns count those steps only (the env lets an episode run longer:"
                  " max_episode_steps in its kwargs or registration); raise --max-steps to play them further", file=sys.stderr)
        if args.video:
            if sys.stderr.isatty():  # an episode of 1,000 frames, drawn and encoded, took 40 s without a word
                print(f"video: playing one episode of {policy.env_id} (at most {MAX_VIDEO_FRAMES:,} frames) into"
                      f" {args.video} ...", file=sys.stderr, flush=True)
            try:
                total, count, ended = record(policy, args.video, args.seed, MAX_VIDEO_FRAMES)
            except OSError as e:
                raise UnusableModel(f"--video {args.video}: {e.strerror or e}") from None
            print(f"video: {args.video} ({count} frames, return {shown_return(total)}" + ("" if ended else ", the episode cut there") + ")")
        if args.export:
            export_torchscript(policy, args.export)
            print(f"TorchScript: {args.export} (torch.jit.load; a batch of observations -> actions)")
    except (UnusableModel, UnknownEnv, networks.PolicyMismatch) as e:
        print(f"kuberl eval: {e}", file=sys.stderr)
        return 1
    return 0


def score_runs(runs: list[str], args: Any, allowed: tuple[str, ...] | list[str]) -> int:
    """Several runs' models, each played on the same episodes (`--episodes`, `--seed`): a line each, named with the
    learned values that set it apart from its job's other runs (fingerprint.json, as `kuberl plot` names them); a
    line for each configuration's seeds, their mean; then the best configuration of each env that several were
    learned on (returns of two envs do not compare), by its seeds' mean rather than by one lucky seed. One that
    cannot be played is said and the others still scored (exit 1)."""
    if args.video or args.export:
        print(f"kuberl eval: {'--video' if args.video else '--export'} is of one model: give one run (got {len(runs)})",
              file=sys.stderr)
        return 1
    max_steps = getattr(args, "max_steps", None) or MAX_EVAL_STEPS
    run_dirs = [run if os.path.isfile(os.path.join(run, RUN_JOB_FILE)) else None for run in runs]
    values = [recorded_learned_values(run_dir) if run_dir else None for run_dir in run_dirs]
    jobs = [job_of(run_dir) for run_dir in run_dirs]
    configurations, groups = run_labels([_shown(run) for run in runs], jobs, values)
    shown = [f"{_shown(run)} ({text})" if text else _shown(run) for run, text in zip(runs, values_apart(jobs, values), strict=True)]
    scored: dict[int, tuple[float, str]] = {}  # run -> (mean return, env id)
    failed, width = False, max(map(len, shown))
    members: dict[int, list[int]] = {}  # each configuration's runs, configurations in the order their first run sorts
    for i, group in enumerate(groups):
        members.setdefault(group, []).append(i)
    # a configuration's seeds a line each in seed order, as its mean line names them (runs/<job>.<fingerprint> sort
    # by hash: seeds 1, 3, 2 above "seeds 1, 2, 3: mean over 3 seeds (…)")
    order = [of[k] for of in members.values() for k in seed_order([(values[i] or {}).get(fingerprint.SEED) for i in of])]
    for i in order:
        run = runs[i]
        try:
            source = find_model(run, getattr(args, "best", False))
            if (mismatch := final_model_mismatch(source)) is not None and os.path.isdir(run):
                raise UnusableModel(f"{mismatch} (not this run's model?)")
            policy = load_policy(source, seed=args.seed, env_modules=allowed)
            returns, cut = play(policy, args.episodes, args.seed, max_steps)
        except CustomTrainerRun as e:  # no model by design (`kuberl eval runs` beside bring-your-own-trainer's run)
            print(f"kuberl eval: {safetext.one_line(str(e))} (left out)", file=sys.stderr)
            continue
        except (UnusableModel, UnknownEnv, networks.PolicyMismatch) as e:
            print(f"kuberl eval: {safetext.one_line(str(e))}", file=sys.stderr)  # one line a run, its name escaped
            failed = True
            continue
        trained = f"{policy.timesteps:,} timesteps" if isinstance(policy.timesteps, int) else "timesteps unknown"
        if os.path.isdir(run) and checkpoint.NAME.match(os.path.basename(source)):  # no final model: mid-training
            trained += f", its newest checkpoint; {run_ending(run)}"
        scored[i] = (float(returns.mean()), policy.env_id)
        print(f"{shown[i]:<{width}}  {policy.env_id}: mean return {shown_return(scored[i][0])} ± {shown_return(float(returns.std()))}"
              f" ({policy.algorithm}, {trained}{f'; {int(cut.sum())} episode(s) cut at --max-steps' if cut.any() else ''})")
    # a configuration is a run, or one's seeds, on the env they played (a seed that could not be played is left out)
    configurations_of: dict[tuple[int, str], list[int]] = {}
    for i, (_, env_id) in scored.items():
        configurations_of.setdefault((groups[i], env_id), []).append(i)
    candidates: dict[str, list[tuple[float, str, str]]] = {}
    for (group, env_id), seeds in configurations_of.items():
        seeds = [seeds[k] for k in seed_order([(values[i] or {}).get(fingerprint.SEED) for i in seeds])]  # as named
        means = [scored[i][0] for i in seeds]
        mean = sum(means) / len(means)
        if len(seeds) > 1:
            print(f"{configurations[group]}: mean over {len(seeds)} seeds {shown_return(mean)}"
                  f" ({', '.join(map(shown_return, means))})")
        played = f"{len(seeds)} seeds × {args.episodes} episode(s)" if len(seeds) > 1 else f"{args.episodes} episode(s)"
        candidates.setdefault(env_id, []).append((mean, configurations[group] if len(seeds) > 1 else shown[seeds[0]], played))
    for env_id, group in candidates.items():
        if len(group) > 1:
            mean, best, played = max(group, key=lambda score: score[0])  # a tie: the first given
            on = f" on {env_id}" if len(candidates) > 1 else ""
            # --seed: the episodes' seed, not a training seed of the runs named
            print(f"best{on}: {best} (mean return {shown_return(mean)} over {played}, --seed {args.seed})")
    return 1 if failed else 0
