"""Rank programs for the DDP tests: `python -m tests.distributed.workers
SCENARIO OUT_DIR` with the env contract set; each rank saves what it saw to
OUT_DIR/rank-N.pt for the test to compare."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import numpy as np
import torch
from kuberl.core import trainerconfig
from kuberl.core.spec import DQNConfig, PPOConfig
from kuberl_trainer.distributed import process_group
from kuberl_trainer.dqn import DQNTrainer
from kuberl_trainer.ppo import PPOTrainer
from kuberl_trainer.session import TrainingSession

STEPS, ENVS_PER_RANK = 8, 4
EQUIVALENCE_HP = PPOConfig(num_steps=STEPS, num_minibatches=1, update_epochs=3, grad_accumulation=2,
                           norm_advantage=False, learning_rate=1e-2)


def synthetic_rollout(trainer: PPOTrainer, envs: slice) -> tuple[np.ndarray, np.ndarray]:
    """The same global batch (STEPS x 2*ENVS_PER_RANK) everywhere; each caller
    keeps the env columns `envs`. Two autoreset steps per half, so both halves
    weigh the same."""
    rng = np.random.default_rng(42)
    shape = (STEPS, 2 * ENVS_PER_RANK)
    obs = rng.normal(size=(*shape, 4)).astype(np.float32)
    actions = rng.integers(0, 2, shape)
    valid = np.ones(shape, np.float32)
    valid[[1, 5], [0, 2]] = 0
    valid[[2, 6], [ENVS_PER_RANK + 1, ENVS_PER_RANK + 3]] = 0
    advantages = rng.normal(size=shape).astype(np.float32)
    returns = rng.normal(size=shape).astype(np.float32)
    buf = trainer.buf
    buf.obs[:] = obs[:, envs]
    buf.actions[:] = actions[:, envs]
    buf.valid[:] = valid[:, envs]
    with torch.no_grad():
        log_probs, _, values = trainer.agent(buf.obs_t, buf.actions_t)
    buf.log_probs[:] = (log_probs - 0.05).numpy()  # off-policy enough that ratios move
    buf.values[:] = values.numpy()
    return advantages[:, envs], returns[:, envs]


def params(trainer: PPOTrainer) -> dict:
    return {k: v.detach().clone() for k, v in trainer.agent.state_dict().items()}


def stop_rank_1_at_step(trainer: PPOTrainer | DQNTrainer, n: int) -> tuple[threading.Event, list[int]]:
    """Count the trainer's learner steps (one entry each in the list returned) and, on rank 1 alone, set the
    returned stop event at its `n`th, before that step runs: a stop asked of one rank while learning."""
    stop, steps, step = threading.Event(), [], trainer.learner.step

    def step_then_stop(*args):
        steps.append(1)
        if trainer.ctx.rank == 1 and len(steps) == n:
            stop.set()
        return step(*args)

    trainer.learner.step = step_then_stop
    return stop, steps


def equivalence(out: Path) -> None:
    with process_group("gloo", 60, 60) as ctx:
        plain = ctx.world_size == 1
        # the reference takes one plain step; the ranks accumulate two micro-batches each
        hp = EQUIVALENCE_HP.model_copy(update={"grad_accumulation": 1}) if plain else EQUIVALENCE_HP
        trainer = PPOTrainer(ctx, hp, "CartPole-v1", ENVS_PER_RANK * (2 if plain else 1), {}, 10**6, 1, 0)
        first_obs = trainer.next_obs.copy()
        envs = slice(None) if plain else slice(ctx.rank * ENVS_PER_RANK, (ctx.rank + 1) * ENVS_PER_RANK)
        trainer.learn(*synthetic_rollout(trainer, envs))
        after_one = params(trainer)
        # Adam's first moments keep the gradients' scale (its steps do not)
        moments = [trainer.optimizer.state[p]["exp_avg"].clone() for p in trainer.agent.parameters()]
        local_episodes, global_episodes = [], []
        for _ in range(4):  # real updates: collect, all-reduce counters, learn
            trainer.collect()
            local_episodes.append(len(trainer.tracker.finished_returns))
            totals, _ = trainer.sync_update(trainer.local_statistics(), stop_vote=False, success_vote=False)
            global_episodes.append(int(totals["episodes"]))
            trainer.learn(*trainer.advantages(False))
        torch.save({"after_one": after_one, "moments": moments, "after_many": params(trainer), "first_obs": first_obs,
                    "local_episodes": local_episodes, "global_episodes": global_episodes},
                   out / f"rank-{ctx.rank}.pt")


def resume(out: Path) -> None:
    """Rank 0 loads the newest checkpoint and broadcasts it; every rank
    records its state right after."""
    config = trainerconfig.load(__import__("json").loads((out / "config.json").read_text()))
    spec = config.spec
    with process_group("gloo", 60, 60) as ctx:
        trainer = PPOTrainer(ctx, spec.hyperparameters, spec.env.id, spec.env.num_envs, {}, spec.total_timesteps, spec.seed, 1)
        session = TrainingSession(config, ctx, None, 1, threading.Event(), log=lambda _: None)
        shared, _ = session.load()
        trainer.load_shared(shared)
        torch.save({"agent": params(trainer), "optimizer": trainer.optimizer.state_dict(),
                    "counters": vars(trainer.counters).copy()}, out / f"rank-{ctx.rank}.pt")


def initial(ctx) -> dict:
    """Each rank builds the fused PPO and DQN trainers from its OWN seed;
    records their weights, and whether torch._dynamo got imported (DDP's
    constructor imports it; the fused path must not construct DDP): first
    in its process, before anything else could import it."""
    from kuberl.core.spec import DQNConfig
    from kuberl_trainer.dqn import DQNTrainer

    seed = 10 + ctx.rank
    ppo = PPOTrainer(ctx, PPOConfig(num_steps=STEPS), "CartPole-v1", 2, {}, 10_000, seed, 0)
    dqn = DQNTrainer(ctx, DQNConfig(hidden_sizes=[16, 16]), "CartPole-v1", 2, {}, 10_000, seed, 0)
    assert type(ppo.learner).__name__ == "FusedPPOStep" and type(dqn.learner).__name__ == "FusedQLearner"
    return {"ppo": params(ppo), "dqn": {k: v.clone() for k, v in dqn.agent.state_dict().items()},
            "dqn_target": {k: v.clone() for k, v in dqn.target.state_dict().items()},
            "dynamo_imported": "torch._dynamo" in sys.modules}


def mismatch(out: Path) -> None:
    """Rank 1 runs a different network: both ranks must refuse, naming it."""
    with process_group("gloo", 60, 60) as ctx:
        hidden = [64, 64] if ctx.rank == 0 else [32, 32]
        try:
            PPOTrainer(ctx, PPOConfig(num_steps=STEPS, hidden_sizes=hidden), "CartPole-v1", 2, {}, 10_000, 1, 0)
            error = None
        except RuntimeError as e:
            error = str(e)
        torch.save({"error": error}, out / f"rank-{ctx.rank}.pt")


def gradient_sync(out: Path) -> None:
    """The fused steps' gradient all-reduce: a sum on time, a sum when a peer
    is later than the yielding wait (the blocking wait takes over), then rank 1
    leaves without its part: rank 0 must get PeerLost, not hang. Records how
    many of those sums went through torch.distributed's all_reduce (every one:
    there is no other transport), the CPUs each rank was given (processes of
    one pod split the pod's CPUs) and the scheduling policy of gloo's event
    loop threads."""
    import os
    import time

    import torch.distributed as dist
    from kuberl_trainer import distributed

    through_torch = []
    real_all_reduce = dist.all_reduce

    def counting_all_reduce(tensor, *args, **kwargs):
        through_torch.append(tensor.numel())
        return real_all_reduce(tensor, *args, **kwargs)

    dist.all_reduce = counting_all_reduce
    with process_group("gloo", 60, 60) as ctx:
        on_time = torch.full((1000,), float(ctx.rank + 1))
        distributed.all_reduce_gradient(ctx, on_time)
        if ctx.rank == 1:
            time.sleep(max(5 * ctx.sync_yield_seconds, 0.05))
        late = torch.full((1000,), float(ctx.rank + 1))
        distributed.all_reduce_gradient(ctx, late)
        loop_threads = distributed.threads_named(distributed.GLOO_LOOP_THREAD)
        result = {"on_time": on_time, "late": late, "cpus": sorted(os.sched_getaffinity(0)), "yield": ctx.sync_yield_seconds,
                  "threads": torch.get_num_threads(), "through_torch": list(through_torch),
                  "loop_policies": [os.sched_getscheduler(tid) for tid in loop_threads]}
        if ctx.rank == 1:
            torch.save(result, out / f"rank-{ctx.rank}.pt")
            os._exit(0)  # gone without its part of the next sync
        try:
            distributed.all_reduce_gradient(ctx, torch.ones(1000))
            result["lost"] = None
        except distributed.PeerLost as e:
            result["lost"] = str(e)
        torch.save(result, out / f"rank-{ctx.rank}.pt")


def stop_while_learning(ctx) -> dict:
    """Rank 1 alone is asked to stop, during its second epoch (its third minibatch step of 2 per epoch);
    rank 0 never is. Each rank records its update's report and weights."""
    trainer = PPOTrainer(ctx, PPOConfig(num_steps=STEPS, update_epochs=4, num_minibatches=2), "CartPole-v1", 2, {},
                         10**6, 1, 0)
    stop, steps = stop_rank_1_at_step(trainer, 3)
    report = trainer.update(stop.is_set, False)
    return {"epochs_run": report.epochs_run, "stop": report.stop, "steps": len(steps), "agent": params(trainer)}


def votes_where_epochs_are_long(ctx) -> dict:
    """The all-reduces (distributed.all_reduce_sum) of three updates of CartPole, whose epochs take
    milliseconds: the first reads a stop after each epoch (nothing measured yet), the next ones only at
    their rollout's all-reduce. Rank 1 is asked to stop during the second update's learning. Votes are
    STOP_VOTE_SECONDS apart: set to 60 s here, an epoch is short beside it however loaded the machine (at
    0.5 s, an epoch of two ranks stretched past 0.125 s by the load would get a vote each). Both settings
    stay for the rest of the process: two_rank_scenarios runs it last."""
    from kuberl_trainer import base, distributed

    base.STOP_VOTE_SECONDS = 60.0
    trainer = PPOTrainer(ctx, PPOConfig(num_steps=STEPS, update_epochs=4, num_minibatches=2), "CartPole-v1", 2, {},
                         10**6, 1, 0)
    calls, real = [], distributed.all_reduce_sum
    distributed.all_reduce_sum = lambda *args: calls.append(1) or real(*args)
    stop, step = threading.Event(), trainer.learner.step
    counts, stops = [], []
    for update in range(3):
        if update == 1 and ctx.rank == 1:
            trainer.learner.step = lambda *args: stop.set() or step(*args)
        calls.clear()
        stops.append(trainer.update(stop.is_set, False).stop)
        counts.append(len(calls))
    return {"counts": counts, "stops": stops, "epoch_seconds": trainer.learning_stop.unit_seconds,
            "vote_seconds": base.STOP_VOTE_SECONDS}


def dqn_stop_while_learning(ctx) -> dict:
    """DQN's first learning iteration, 64 gradient steps (untimed yet: a vote every 16), rank 1 alone asked to
    stop at its 20th; rank 0 never is. Each rank records the iterations' reports and its weights."""
    hp = DQNConfig(learning_starts=64, batch_size=16, buffer_size=512, train_frequency=8, gradient_steps=64)
    trainer = DQNTrainer(ctx, hp, "CartPole-v1", 2, {}, 10**6, 1, 0, fast=False)
    stop, steps = stop_rank_1_at_step(trainer, 20)
    reports = []
    while not reports or not reports[-1].stop:
        reports.append(trainer.update(stop.is_set, False))
    return {"reports": [(r.epochs_run, r.stop) for r in reports], "steps": len(steps), "agent": params(trainer)}


def graphed_q(ctx) -> dict:
    """DQN's graphed learner (learners.GraphedQLearner, its bookkeeping without a GPU: graph=False)
    beside the reference (DDP) on two ranks that start from different weights and learn on different
    batches: each records both learners' weights after a few steps."""
    from kuberl.core.spec import DQNConfig
    from kuberl_trainer import dqn, learners

    made = {}
    for name, kind in (("reference", learners.AutogradQLearner), ("graphed", learners.GraphedQLearner)):
        torch.manual_seed(10 + ctx.rank)  # rank 0's weights must win, everywhere
        agent, target = dqn.QNetwork(4, 2, [16]), dqn.QNetwork(4, 2, [16])
        extra = {"graph": False} if kind is learners.GraphedQLearner else {}
        made[name] = kind(agent, target, DQNConfig(batch_size=8, learning_rate=1e-2), ctx, dqn.q_loss,
                          dict.fromkeys(("train_forward", "backward_optimizer"), 0.0), **extra)
    rng = np.random.default_rng(ctx.rank)
    for _ in range(5):
        obs, next_obs = (torch.from_numpy(rng.normal(size=(16, 4)).astype(np.float32)) for _ in range(2))
        batch = (obs, torch.from_numpy(rng.integers(0, 2, 16)), torch.from_numpy(rng.normal(size=16).astype(np.float32)),
                 torch.full((16,), 0.99))
        for learner in made.values():
            next_inputs = learner.inputs(next_obs)
            learner.learn_draw((*batch, next_inputs), learner.target_q(next_inputs))
    return {name: {"agent": [p.detach().clone() for p in learner.agent.parameters()],
                   "target": [p.detach().clone() for p in learner.target.parameters()],
                   "allreduces": len(learner.allreduce_seconds)} for name, learner in made.items()}


def graphed_ranks(out: Path) -> None:
    """The graphed learners between ranks on whatever backend "auto" picks: NCCL on a node of two GPUs
    or more (tests/gpu/test_nccl_ranks.py; the steps replayed from CUDA graphs, the gradient all-reduced
    between them on NCCL's stream), gloo on CPU (graph=False: the same bookkeeping, tests/distributed).
    Each rank learns from batches of its own, from weights of its own (rank 0's must win), with the
    graphed learner and the reference (DDP) side by side, and records both; and the collectives the
    trainer runs between ranks, with any warning torch gave."""
    import warnings

    import gymnasium as gym
    from kuberl_trainer import distributed, dqn, learners, ppo
    from kuberl_trainer.ppo_terms import minibatch_table

    with warnings.catch_warnings(record=True) as said, process_group("auto", 120, 120) as ctx:
        warnings.simplefilter("always")
        device, graph = ctx.device, ctx.device.type == "cuda"
        timings = dict.fromkeys(("train_forward", "backward_optimizer"), 0.0)
        seen = {"backend": ctx.backend, "device": str(device),
                "current_device": torch.cuda.current_device() if graph else None}
        torch.distributed.barrier()  # NCCL: on the device init_process_group bound (device_id)
        seen["sum"] = distributed.all_reduce_sum(ctx, torch.tensor([1.0, ctx.rank], dtype=torch.float64)).tolist()
        seen["object"] = distributed.broadcast_object(ctx, {"rank": ctx.rank})
        seen["gathered"] = distributed.gather_bytes(ctx, bytes([ctx.rank]) * (ctx.rank + 1))
        seen["broadcast"] = distributed.broadcast_bytes(ctx, b"from rank 0" if ctx.rank == 0 else None)
        made = {}
        for name, kind in (("q reference", learners.AutogradQLearner), ("q graphed", learners.GraphedQLearner)):
            torch.manual_seed(10 + ctx.rank)
            agent, target = dqn.QNetwork(4, 2, [16]).to(device), dqn.QNetwork(4, 2, [16]).to(device)
            extra = {"graph": graph} if kind is learners.GraphedQLearner else {}
            made[name] = kind(agent, target, DQNConfig(batch_size=8, learning_rate=1e-2), ctx, dqn.q_loss, timings, **extra)
        hp = PPOConfig(grad_accumulation=2, learning_rate=1e-2)
        for name, kind in (("ppo reference", learners.AutogradPPOLearner), ("ppo graphed", learners.GraphedPPOLearner)):
            torch.manual_seed(10 + ctx.rank)
            agent = ppo.Agent(4, gym.spaces.Discrete(2), [16]).to(device)
            made[name] = kind(agent, hp, ctx, ppo.ppo_loss, **({"graph": graph} if kind is learners.GraphedPPOLearner else {}))
        rng = np.random.default_rng(ctx.rank)
        for _ in range(5):  # 10 Q steps and 5 PPO steps: warm-ups, a capture, replays
            obs, next_obs = (torch.from_numpy(rng.normal(size=(16, 4)).astype(np.float32)).to(device) for _ in range(2))
            batch = (obs, torch.from_numpy(rng.integers(0, 2, 16)).to(device),
                     torch.from_numpy(rng.normal(size=16).astype(np.float32)).to(device), torch.full((16,), 0.99, device=device))
            scalars = np.stack([rng.normal(size=16) - 1, *(rng.normal(size=16) for _ in range(3)), np.ones(16)], -1)
            rows = minibatch_table(torch.from_numpy(rng.integers(0, 2, (16, 1))), torch.from_numpy(scalars.astype(np.float32))).to(device)
            for name, learner in made.items():
                if name.startswith("q"):
                    next_inputs = learner.inputs(next_obs)
                    learner.learn_draw((*batch, next_inputs), learner.target_q(next_inputs))
                else:
                    learner.step(obs, rows)
        if graph:
            torch.cuda.synchronize()
        seen["learners"] = {name: {"agent": [p.detach().cpu().clone() for p in learner.agent.parameters()],
                                   "captured": getattr(getattr(learner, "backward", None), "cuda_graph", None) is not None}
                            for name, learner in made.items()}
    seen["warnings"] = [str(w.message) for w in said]
    torch.save(seen, out / f"rank-{ctx.rank}.pt")


def gather(out: Path) -> None:
    """Each rank's bytes of its own length (rank 1's empty) gathered on rank 0 as tensors, never pickled."""
    from kuberl_trainer import distributed

    with process_group("gloo", 60, 60) as ctx:
        own = bytes([7 + ctx.rank]) * (5 if ctx.rank == 0 else 0 if ctx.rank == 1 else 3)
        torch.save({"gathered": distributed.gather_bytes(ctx, own)}, out / f"rank-{ctx.rank}.pt")


def two_rank_scenarios(out: Path) -> None:
    """initial (first: it records whether torch._dynamo was imported), graphed_q, the stops while learning, then
    the votes (whose settings stay), in one process group: a launch of two ranks costs their imports and
    rendezvous, more than these few updates."""
    with process_group("gloo", 60, 60) as ctx:
        seen = {scenario.__name__: scenario(ctx) for scenario in
                (initial, graphed_q, stop_while_learning, dqn_stop_while_learning, votes_where_epochs_are_long)}
        torch.save(seen, out / f"rank-{ctx.rank}.pt")


if __name__ == "__main__":
    {"equivalence": equivalence, "resume": resume, "mismatch": mismatch, "gradient_sync": gradient_sync,
     "gather": gather, "graphed_ranks": graphed_ranks, "two_rank_scenarios": two_rank_scenarios}[sys.argv[1]](Path(sys.argv[2]))
