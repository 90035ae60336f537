"""The one evaluation protocol (kuberl_trainer.evaluation), which `make bench` also runs for
Stable-Baselines3, and the startup line each rank prints (kuberl_trainer.startup)."""

import json
import subprocess
import sys
import time

import gymnasium as gym
import numpy as np
import pytest
from kuberl_trainer import evaluation
from kuberl_trainer.startup import Startup, import_in_background, process_age


def first_episode_return(env_id: str, seed: int, policy) -> float:
    env = gym.make(env_id)
    obs, _ = env.reset(seed=seed)
    total, done = 0.0, False
    while not done:
        obs, reward, terminated, truncated, _ = env.step(policy(obs[None])[0])
        total += float(reward)
        done = terminated or truncated
    env.close()
    return total


def test_the_trainers_evaluation_cuts_an_episode_that_would_never_end_and_says_so(monkeypatch, caplog):
    """Pendulum never ends by itself: with spec.env.kwargs max_episode_steps 10**9, rank 0's evaluation played on
    for good and the gang, waiting at its next collective, stalled until restarted, again and again."""
    import torch
    from kuberl.core.spec import PPOConfig
    from kuberl_trainer.distributed import Dist
    from kuberl_trainer.ppo import PPOTrainer

    monkeypatch.setattr(evaluation, "MAX_EPISODE_STEPS", 40)
    endless = {"max_episode_steps": 10**9}
    trainer = PPOTrainer(Dist(0, 1, 0, 1, torch.device("cpu"), None), PPOConfig(num_steps=16, hidden_sizes=[8]),
                         "Pendulum-v1", 2, endless, 64, seed=1, restart=0)
    with caplog.at_level("WARNING", logger=evaluation.__name__):
        value = trainer.evaluate("Pendulum-v1", 3, endless, seed=5)
    assert -40 * 16.3 <= value < 0  # 40 steps of Pendulum's cost, at most 16.27 each
    assert "evaluation: 3 of 3 episode(s) had not ended after 40 steps" in caplog.text


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Acrobot-v1"])
def test_copy_i_plays_its_first_episode_from_seed_plus_i(env_id):
    """Copies that end early are autoreset by the vector env: their later episodes never count."""
    def lean(obs):  # a fixed, state-dependent policy: episodes of different lengths
        return (obs[:, 1] > 0).astype(np.int64) if env_id == "CartPole-v1" else np.zeros(len(obs), np.int64)

    envs = gym.make_vec(env_id, num_envs=5, vectorization_mode="sync")
    try:
        got = evaluation.mean_return(envs, lean, 5, seed=40)
    finally:
        envs.close()
    expected = [first_episode_return(env_id, 40 + i, lean) for i in range(5)]
    assert got == pytest.approx(np.mean(expected))
    if env_id == "CartPole-v1":
        assert len(set(expected)) > 1, "episodes of different lengths, so autoreset episodes would change the mean"


def test_a_process_knows_how_long_ago_it_was_launched():
    code = "import time; time.sleep(0.6); from kuberl_trainer.startup import process_age; print(process_age())"
    age = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert 0.6 <= age < 60
    assert process_age() > 0


def test_the_startup_line_splits_launch_to_first_step_into_phases():
    startup = Startup()
    startup.mark("rendezvous")
    envs_ready = time.monotonic()
    time.sleep(0.01)
    startup.mark("envs", at=envs_ready)  # taken when the envs were ready, marked after the networks
    startup.mark("networks")
    seconds = startup.seconds()
    assert list(seconds) == ["python and imports", "rendezvous", "envs", "networks", "total"]
    assert seconds["networks"] >= 0.01
    assert seconds["total"] == pytest.approx(sum(v for k, v in seconds.items() if k != "total"))
    assert seconds["python and imports"] > 0  # this test process started before Startup()
    line = startup.line(3)
    assert line.startswith("kuberl trainer: rank 3 ready to step ") and "rendezvous" in line


def test_a_module_imported_in_the_background_runs_once_and_a_later_import_waits_for_it(tmp_path, monkeypatch):
    """The trainer starts importing torch._dynamo (a second) while the envs reset;
    the optimiser's own import later must get that module, not a second copy. The module
    loads until the test opens a gate, not for a time: a caller that waited for it would
    find the gate shut (it was a 0.3 s sleep against a 0.2 s wall-clock bound, which a loaded
    machine can stretch the caller past)."""
    (tmp_path / "import_gate.py").write_text("import threading\nENTERED, OPENED = threading.Event(), threading.Event()\n")
    (tmp_path / "slow_to_import.py").write_text(
        "import threading\nimport import_gate\nRUNS = [threading.current_thread().name]\nimport_gate.ENTERED.set()\n"
        "OPENED_WHILE_LOADING = import_gate.OPENED.wait(10)\n")
    (tmp_path / "broken_on_import.py").write_text("raise RuntimeError('this module cannot load')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("import_gate", "slow_to_import", "broken_on_import"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    import import_gate

    thread = import_in_background("slow_to_import")
    assert import_gate.ENTERED.wait(10)  # the module is loading: a later import meets its import lock
    import_gate.OPENED.set()  # the caller goes on while the module loads
    import slow_to_import  # waits on the module's import lock: no second execution

    assert slow_to_import.RUNS == ["import slow_to_import"] and slow_to_import.OPENED_WHILE_LOADING
    thread.join(5)
    import_in_background("broken_on_import").join(5)  # the thread swallows it ...
    with pytest.raises(RuntimeError, match="cannot load"):  # ... and the importer that needs it sees it
        import broken_on_import  # noqa: F401


NEW_MODULES = """
import json, os, sys
import kuberl_trainer.__main__
from kuberl_trainer.distributed import process_group
from kuberl_trainer.envs import make_envs
before = set(sys.modules)
if sys.argv[1] == "dynamo":
    import torch._dynamo
else:  # the main thread's work while the background import runs: rendezvous, envs and their reset
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=sys.argv[2])
    with process_group("gloo", 60, 60):
        make_envs("ALE/Pong-v5", 2, {}, "auto").reset(seed=1)
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def test_what_the_main_thread_imports_while_torch_dynamo_loads_in_the_background_is_disjoint_from_it():
    """Two threads importing can deadlock (Python then raises in one of them) only when each
    waits on a module the other is importing. During the background import of torch._dynamo the
    main thread imports only ale-py's modules (rendezvous, envs): none of them is torch._dynamo's."""
    from tests.support.ports import free_ports

    def new_modules(*args: str) -> set[str]:
        out = subprocess.run([sys.executable, "-c", NEW_MODULES, *args], capture_output=True, text=True, timeout=120,
                             check=True).stdout
        return set(json.loads(out))

    dynamo, window = new_modules("dynamo"), new_modules("window", str(free_ports(1)))
    assert "torch._dynamo" in dynamo and window, (len(dynamo), window)
    assert window & dynamo == set()


def test_a_launched_rank_imports_without_cyclic_collections_then_collects_again():
    """`python -m kuberl_trainer` pauses the collector for its imports (each full pass walked every
    object the imports had made so far), then freezes those objects and turns it back on; an import
    of the module by anything else leaves the collector alone."""
    code = (
        "import gc, runpy, sys\n"
        "def seen(phase, info):  # a collection once torch's import began and before the freeze: during the imports\n"
        "    if phase == 'start' and 'torch' in sys.modules and not gc.get_freeze_count():\n"
        "        print('collected', info['generation'], flush=True)\n"
        "gc.callbacks.append(seen)\n"
        "sys.argv = ['kuberl_trainer', '--help']\n"
        "try:\n"
        "    runpy.run_module('kuberl_trainer', run_name='__main__', alter_sys=True)\n"
        "except SystemExit:\n"
        "    pass\n"
        "gc.callbacks.clear()\n"
        "print('after', gc.isenabled(), gc.get_freeze_count())\n"
    )
    launched = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    lines = [x for x in launched.stdout.splitlines() if x.startswith(("collected", "after"))]
    enabled, frozen = lines[-1].split()[1:]
    assert lines[:-1] == [], "a collection ran during the imports"
    assert enabled == "True" and int(frozen) > 50_000, launched.stdout
    imported = subprocess.run([sys.executable, "-c", "import gc, kuberl_trainer.__main__; print(gc.isenabled(), gc.get_freeze_count())"],
                              capture_output=True, text=True, timeout=120, check=True)
    assert imported.stdout.split() == ["True", "0"]
