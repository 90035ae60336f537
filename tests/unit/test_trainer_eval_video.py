"""`kuberl eval --video` of envs that draw with OpenGL. A MuJoCo model (HalfCheetah) on a machine without
a display ended in mujoco.FatalError's traceback ("an OpenGL platform library has not been loaded"),
after GLFW's warnings about DISPLAY; MuJoCo draws off-screen through EGL there. An env that cannot draw
at all is one line naming it, as pygame's absence is."""

import os
import subprocess
import sys
from typing import ClassVar

import gymnasium as gym
import numpy as np
import pytest
import torch
from kuberl.cli import main
from kuberl.core.spec import PPOConfig
from kuberl_trainer.distributed import Dist
from kuberl_trainer.ppo import PPOTrainer

ONE_PROCESS = Dist(0, 1, 0, 1, torch.device("cpu"), None)
HEADLESS = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "MUJOCO_GL", "PYOPENGL_PLATFORM")}


def final_model(tmp_path, env_id: str, env_kwargs: dict) -> str:
    trainer = PPOTrainer(ONE_PROCESS, PPOConfig(num_steps=8, hidden_sizes=[8]), env_id, 1, env_kwargs, 8, seed=1, restart=0)
    path = str(tmp_path / "final-model.pt")
    torch.save({**trainer.final_model(), "format": 1, "algorithm": "ppo", "env_id": env_id, "env_kwargs": env_kwargs,
                "timesteps": 0, "eval_return": None}, path)
    return path


@pytest.mark.skipif(sys.platform != "linux", reason="EGL is how MuJoCo draws without a display on Linux")
def test_a_mujoco_video_is_drawn_without_a_display(tmp_path, monkeypatch):
    pytest.importorskip("mujoco", reason="MuJoCo envs need PyPI's mujoco (not a test dependency)")
    monkeypatch.chdir(tmp_path)  # MuJoCo writes its warnings to MUJOCO_LOG.TXT where it runs
    path = final_model(tmp_path, "HalfCheetah-v5", {"max_episode_steps": 5})
    done = subprocess.run([sys.executable, "-m", "kuberl.cli", "eval", path, "--episodes", "1", "--video", str(tmp_path / "h.gif")],
                          env=HEADLESS, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "video: " in done.stdout and (tmp_path / "h.gif").exists()


class Unrenderable(gym.Env):
    """Draws as an OpenGL env does where no OpenGL context can be made."""

    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    action_space = gym.spaces.Box(-1, 1, (1,), np.float32)
    metadata: ClassVar[dict] = {"render_modes": ["rgb_array"]}

    def __init__(self, render_mode=None):
        self.render_mode = render_mode

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 0.0, True, False, {}

    def render(self):
        raise RuntimeError("an OpenGL platform library has not been loaded into this process")


def test_an_env_that_cannot_draw_here_is_one_line_naming_it(tmp_path, capsys):
    env_id = "tests.unit.test_trainer_eval_video:Unrenderable"
    path = final_model(tmp_path, env_id, {})
    assert main(["eval", path, "--episodes", "1", "--video", str(tmp_path / "u.gif"), "--allow-env-module", "tests.unit"]) == 1
    err = capsys.readouterr().err
    assert err == (f"kuberl eval: --video: {env_id} cannot draw its frames here (RuntimeError: an OpenGL platform library"
                   " has not been loaded into this process)\n"), err
