"""The seam (learners.py): an algorithm gets a learner and an actor for its
network on its device, never asks which, and the fast path can be switched off."""

import ast
from pathlib import Path

import pytest
import torch
from kuberl.core.spec import ALGORITHM_BLOCKS, DQNConfig, PPOConfig
from kuberl_trainer import __main__ as main
from kuberl_trainer import fastpolicy, fused, learners
from kuberl_trainer.distributed import Dist
from kuberl_trainer.dqn import DQNTrainer
from kuberl_trainer.ppo import PPOTrainer
from kuberl_trainer.session import BareSession

from tests.unit.trainer_support import ENV_OF

TRAINER = Path(__file__).resolve().parents[2] / "trainer/kuberl_trainer"
ONE_PROCESS = Dist(0, 1, 0, 1, torch.device("cpu"), None)
ALGORITHM_FILES = sorted(f"{entry.make.__module__.rsplit('.', 1)[1]}.py" for entry in main.ALGORITHMS.values())
# each algorithm's hyperparameters for a few quick updates that learn: a new algorithm is a row here
QUICK = {"ppo": {"num_steps": 8, "hidden_sizes": [8]},
         "dqn": {"learning_starts": 16, "batch_size": 8, "train_frequency": 8, "gradient_steps": 1, "hidden_sizes": [8]},
         "sac": {"learning_starts": 16, "batch_size": 8, "train_frequency": 8, "gradient_steps": 1, "hidden_sizes": [8]},
         "td3": {"learning_starts": 16, "batch_size": 8, "train_frequency": 8, "gradient_steps": 2, "hidden_sizes": [8]}}


@pytest.mark.parametrize("fast", [True, False])
def test_ppo_gets_the_fast_path_or_the_reference_and_learns_either_way(fast):
    trainer = PPOTrainer(ONE_PROCESS, PPOConfig(num_steps=8, hidden_sizes=[16, 16]), "CartPole-v1", 2, {}, 64, seed=1,
                         restart=0, fast=fast)
    expected = (fused.FusedPPOStep, fastpolicy.NumpyPolicy) if fast else (learners.AutogradPPOLearner, learners.TorchPolicy)
    assert (type(trainer.learner), type(trainer.actor)) == expected
    before = [p.detach().clone() for p in trainer.agent.parameters()]
    assert trainer.train(BareSession()) == "budget"
    assert any(not torch.equal(a, p) for a, p in zip(before, trainer.agent.parameters(), strict=True))
    assert trainer.optimizer is trainer.learner.optimizer  # the learning rate is annealed through it
    assert trainer.evaluate("CartPole-v1", 2, {}, 7) > 0


@pytest.mark.parametrize("fast", [True, False])
def test_dqn_gets_the_fast_path_or_the_reference_and_learns_either_way(fast):
    hp = DQNConfig(learning_starts=32, batch_size=16, train_frequency=8, gradient_steps=2, target_update_interval=32,
                   hidden_sizes=[16, 16])
    trainer = DQNTrainer(ONE_PROCESS, hp, "CartPole-v1", 2, {}, 200, seed=1, restart=0, fast=fast)
    assert type(trainer.learner) is (learners.FusedQLearner if fast else learners.AutogradQLearner)
    assert trainer.train(BareSession()) == "budget"
    assert trainer.counters.global_step >= 200 and trainer.last_target_update > 0
    assert trainer.evaluate("CartPole-v1", 2, {}, 7) > 0


@pytest.mark.parametrize("algorithm", ALGORITHM_FILES)
def test_an_algorithm_never_asks_which_learner_it_got(algorithm):
    """No import of the fast path's modules or of DDP, no attribute naming them:
    the choice is learners.py's alone."""
    tree = ast.parse((TRAINER / algorithm).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                for alias in node.names} | {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not imported & {"fused", "fastpolicy", "DistributedDataParallel", "torch.nn.parallel"}, imported
    attributes = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    assert not attributes & {"fused", "fast", "model"}, attributes
    tests = [ast.unparse(node.test) for node in ast.walk(tree) if isinstance(node, (ast.If, ast.IfExp))]
    assert not [t for t in tests if "fast" in t or "fused" in t], tests


@pytest.mark.parametrize("name", ["LOG_SQRT_2PI", "STAT_NAMES"])
def test_shared_constants_are_defined_once(name):
    defined = [path.name for path in sorted(TRAINER.glob("*.py"))
               for node in ast.walk(ast.parse(path.read_text()))
               if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)]
    assert defined == ["ppo_terms.py"]


def test_the_updates_statistics_are_reduced_by_name():
    """base.all_reduce_named: numbers and arrays in, the same names back in their shapes
    (one process: the sum is the value), whatever the order they were given in."""
    import numpy as np
    from kuberl_trainer.base import all_reduce_named

    values = {"return_moments": np.array([2.0, 3.0, 5.0]), "steps": 16, "stop_votes": 1.0}
    totals = all_reduce_named(ONE_PROCESS, values)
    assert list(totals) == ["return_moments", "steps", "stop_votes"]
    assert totals["steps"] == 16.0 and totals["stop_votes"] == 1.0
    np.testing.assert_array_equal(totals["return_moments"], [2.0, 3.0, 5.0])
    assert all_reduce_named(ONE_PROCESS, {}) == {}


@pytest.mark.parametrize("algorithm", ALGORITHM_FILES)
def test_what_algorithms_share_is_written_once_in_the_base(algorithm):
    """Seeding, envs, checkpoint state and the loop are base.BaseAlgorithm's: an
    algorithm module defines none of them, and reads no statistic by position."""
    tree = ast.parse((TRAINER / algorithm).read_text())
    defined = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
    assert not defined & {"shared_state", "load_shared", "rank_state", "load_rank", "train", "sync"}, defined
    source = (TRAINER / algorithm).read_text()
    assert "rank_seed(" not in source and "totals[" not in source.replace('totals["', "")


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("name", sorted(main.ALGORITHMS))
def test_every_statistic_an_algorithm_reports_has_a_gauge(name, fast):
    """UpdateReport.losses by name -> metricnames.LOSS_GAUGES: a statistic without a row would not be exported."""
    from kuberl.core import metricnames

    assert set(QUICK) == set(main.ALGORITHMS)
    _, model = ALGORITHM_BLOCKS[name]
    trainer = main.ALGORITHMS[name].make(ONE_PROCESS, model(**QUICK[name]), ENV_OF[name], 2, {}, 64, 1, 0, fast=fast)
    session = BareSession()
    trainer.train(session)
    reported = {stat for report in session.reports for stat in report.losses}
    assert reported and reported <= set(metricnames.LOSS_GAUGES), reported


@pytest.mark.parametrize("algorithm", sorted(QUICK))
@pytest.mark.parametrize(("env_id", "precision"), [("CartPole-v1", "fp32"), ("CartPole-v1", "bf16"), ("ALE/Pong-v5", "fp32")])
def test_the_spec_foretells_which_learner_imports_torch_dynamo(algorithm, env_id, precision):
    """__main__ starts importing torch._dynamo (a second) before the envs exist when the
    spec foretells the reference learner, so the import overlaps the env reset."""
    from kuberl_trainer import atari

    model = ALGORITHM_BLOCKS[algorithm][1]
    if "precision" not in model.model_fields:  # no fast path: the reference learner always
        assert learners.imports_torch_dynamo(False, False, model(**QUICK[algorithm])) is True
        return
    hp = model(**QUICK[algorithm], precision=precision)
    trainer = main.ALGORITHMS[algorithm].make(ONE_PROCESS, hp, env_id, 1, {}, 64, 1, 0)
    fast_path = isinstance(trainer.learner, (fused.FusedPPOStep, learners.FusedQLearner))
    assert learners.imports_torch_dynamo(atari.is_atari(env_id), False, hp) is not fast_path
    assert learners.imports_torch_dynamo(False, True, hp) is True  # a GPU rank never takes the CPU fast path
