"""SAC and TD3 as pods run them: two real ranks, gloo on 127.0.0.1, each learning from its own replay buffer
with its own exploration (and TD3's target noise), end every update with the same weights (a seeded 2-rank run
is reproducible: seeded envs, weights, noise and replay sampling, and one order of the gloo sum). Each
algorithm's Pendulum example through the real entry point is in its own file (test_sac_processes.py,
test_td3_processes.py)."""

from pathlib import Path

import pytest
import torch
from kuberl.core.spec import SACConfig, TD3Config
from kuberl_trainer.distributed import process_group
from kuberl_trainer.sac import SACTrainer
from kuberl_trainer.td3 import TD3Trainer

from .support import free_ports, launch_rank

ALGORITHMS = {  # trainer, config (SAC's actor every critic step, as TD3's policyDelay 2 steps it every other)
    "sac": (SACTrainer, lambda **hp: SACConfig(policy_frequency=1, **hp)),
    "td3": (TD3Trainer, TD3Config),
}
# every module a rank's shared state carries, each equal on both ranks after the updates
MODULES = {"sac": ("agent", "critics", "target", "temperature"),
           "td3": ("agent", "critics", "target_actor", "target_critics")}


def run_updates(out: str, updates: int = 12) -> None:
    """For each algorithm in turn, in one process group (a launch of two ranks costs their imports and
    rendezvous, more than both algorithms' updates): updates on this rank's own envs and replay buffer
    (distinct seeds per rank), learning from the 4th on; each algorithm's state saved to `out`/ALGORITHM-rankN.pt."""
    with process_group("gloo", 60, 60) as ctx:
        for algorithm, (trainer_class, config) in ALGORITHMS.items():
            hp = config(learning_starts=32, batch_size=16, train_frequency=8, gradient_steps=4, hidden_sizes=[16],
                        buffer_size=1000)
            trainer = trainer_class(ctx, hp, "Pendulum-v1", 2, {}, 10_000, seed=1, restart=0)
            for _ in range(updates):
                trainer.update(False, False)
            torch.save({**trainer.shared_state(), "first_obs": trainer.replay.obs[0]}, f"{out}/{algorithm}-rank{ctx.rank}.pt")


@pytest.fixture(scope="module")
def every_algorithms_ranks(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("continuous")
    port = free_ports(1)
    code = f"from tests.distributed.test_continuous_processes import run_updates; run_updates({str(out)!r})"
    procs = [launch_rank(code, r, 2, port) for r in range(2)]
    assert [p.wait(timeout=150) for p in procs] == [0, 0]
    return out


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_two_ranks_learning_from_their_own_buffers_keep_equal_weights(every_algorithms_ranks, algorithm):
    """The actor's and both critics' gradients (and SAC's alpha's) are all-reduced: ranks that sample different
    transitions and noise step to the same weights, the targets follow alike, and the Adam moments agree; the
    actor moved from its target (SAC: alpha from 1)."""
    rank0, rank1 = (torch.load(every_algorithms_ranks / f"{algorithm}-rank{r}.pt", weights_only=False) for r in range(2))
    assert not (rank0["first_obs"] == rank1["first_obs"]).all()  # each rank's own envs
    assert rank0["critic_updates"] == rank1["critic_updates"] == 9 * 4  # learning from the 4th update (its 32 transitions per rank) on
    for net in MODULES[algorithm]:
        for name, value in rank0[net].items():
            assert torch.equal(value, rank1[net][name]), (net, name)
    for group in ("critics", "policy"):
        assert rank0["optimizer"][group]["state"], group  # both stepped
        for key, state in rank0["optimizer"][group]["state"].items():
            for name, tensor in state.items():
                assert torch.equal(tensor, rank1["optimizer"][group]["state"][key][name]), (group, key, name)
    if algorithm == "sac":
        assert rank0["temperature"]["log_alpha"].item() != 0.0  # alpha learned, from 1
    else:
        assert not torch.equal(rank0["agent"]["net.0.weight"], rank0["target_actor"]["net.0.weight"])  # the actor moved, its target behind
