"""What a recurrent PPO policy (spec.ppo.lstm) needs beyond PPO's maths: the LSTM
between the encoder and the heads, when its state resets, and minibatches that
replay each env's steps in order (CleanRL's ppo_atari_lstm.py, SB3-contrib's
RecurrentPPO).

Rows of a rollout are flattened time-major, (T, N) -> T * N, row t * N + e; a
recurrent minibatch is a set of whole envs, its rows env-major (env e's T steps,
then the next env's), so a sequence is one contiguous block and a micro-batch of
whole envs is one slice. Under gymnasium's next-step autoreset the step after an
episode's last is the autoreset step (`valid` False): it still reads the ended
episode's final observation, and the state resets on the step after it, where
the new episode's first observation arrives.
"""

from __future__ import annotations

import itertools

import numpy as np
import torch
from torch import nn

from .device import full_precision


def episode_starts(valid: np.ndarray, first: np.ndarray) -> np.ndarray:
    """Where each env's state resets before the step: (T, N) float32 from `valid` (T, N), False on
    autoreset steps, and `first` (N,), the rollout's first step's (whether the step before it, the
    previous rollout's last, was an autoreset step). Step t starts an episode when step t-1 was one."""
    starts = np.empty(valid.shape, np.float32)
    starts[0] = first
    starts[1:] = 1.0 - valid[:-1]
    return starts


def env_minibatches(num_envs: int, num_minibatches: int, rng: np.random.Generator) -> list[np.ndarray]:
    """The envs shuffled and split into `num_minibatches` groups whose sizes differ by one at most (every env
    once: CleanRL's envsperbatch, with its remainder kept); needs num_minibatches <= num_envs."""
    if not 1 <= num_minibatches <= num_envs:
        raise ValueError(f"{num_minibatches} minibatches of whole envs need 1 to {num_envs} (the envs)")
    return np.array_split(rng.permutation(num_envs), num_minibatches)


def sequence_rows(envs: np.ndarray, steps: int, num_envs: int) -> np.ndarray:
    """The rollout rows (time-major, row t * num_envs + e) of `envs`' whole sequences, env-major:
    env envs[0]'s steps 0..steps-1, then envs[1]'s, ..."""
    return (np.asarray(envs)[:, None] + num_envs * np.arange(steps)[None, :]).reshape(-1)


def micro_slices(envs: int, steps: int, parts: int) -> list[slice]:
    """A minibatch of `envs` whole sequences (env-major, `steps` rows each) in at most `parts` slices of
    whole sequences, sizes differing by one env at most: grad_accumulation's micro-batches."""
    bounds = np.linspace(0, envs, min(parts, envs) + 1).round().astype(int)
    return [slice(int(a) * steps, int(b) * steps) for a, b in itertools.pairwise(bounds)]


def reset_state(state: tuple[torch.Tensor, torch.Tensor], starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The LSTM state (h, c), each (B, H), zeroed for the envs whose `starts` (B,) is 1, kept where 0."""
    keep = (1.0 - starts).to(state[0].dtype).unsqueeze(-1)
    return state[0] * keep, state[1] * keep


def segments(starts: np.ndarray) -> list[tuple[int, int]]:
    """(first, end) time steps of the runs a batch's LSTM can take in one call: `starts` (T,), whether any
    env's episode starts at t; a run ends before the next step where one does (a reset happens between
    calls). Where no env resets for many steps (long episodes, few envs) a sequence is a few calls, not T."""
    cuts = [0, *(int(t) for t in np.flatnonzero(starts[1:]) + 1), len(starts)]
    return list(itertools.pairwise(cuts))


class LSTMCore(nn.Module):
    """One LSTM layer over encoder features, its state reset for the envs whose episode starts at a step,
    run from each step where some env's episode starts to the next such step in one call (`segments`).
    The runs are read from the starts in host memory: on a GPU from the host copy the caller passes (a
    rollout's starts, collected on the host), never from the device's, whose read would wait for the GPU.
    It runs in fp32 under bf16 autocast (device.full_precision). Weights initialised as CleanRL's
    ppo_atari_lstm.py (orthogonal, biases 0)."""

    def __init__(self, n_in: int, hidden_size: int):
        super().__init__()
        self.hidden_size = hidden_size
        self.lstm = nn.LSTM(n_in, hidden_size)
        for name, param in self.lstm.named_parameters():
            if "bias" in name:
                nn.init.zeros_(param)
            else:
                nn.init.orthogonal_(param, 1.0)

    def zero_state(self, batch: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        shape = (batch, self.hidden_size)
        return torch.zeros(shape, device=device), torch.zeros(shape, device=device)

    def forward(self, features: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor], starts: torch.Tensor,
                host_starts: np.ndarray | None = None) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """features (B * T, F) env-major (env b's T steps together), state (h, c) each (B, H), starts (B * T,),
        `host_starts` the same starts in host memory (needed off the CPU to take more than a step a call):
        (outputs (B * T, H) in the same order, the state after the last step)."""
        batch = state[0].shape[0]
        steps = features.shape[0] // batch
        x = features.reshape(batch, steps, -1).transpose(0, 1)  # (T, B, F)
        begins = starts.reshape(batch, steps).transpose(0, 1)
        h, c = state
        outputs = []
        if host_starts is None and starts.device.type == "cpu":
            host_starts = starts.detach().numpy()
        if host_starts is not None:
            runs = segments(host_starts.reshape(batch, steps).max(0))
        else:  # the starts only on a GPU: reading them would wait for it, so a step a call, as CleanRL
            runs = [(t, t + 1) for t in range(steps)]
        with full_precision(x.device):
            for first, end in runs:
                h, c = reset_state((h, c), begins[first:first + 1].squeeze(0))
                out, (h1, c1) = self.lstm(x[first:end], (h.unsqueeze(0), c.unsqueeze(0)))
                h, c = h1.squeeze(0), c1.squeeze(0)
                outputs.append(out)
        return torch.cat(outputs, 0).transpose(0, 1).reshape(batch * steps, -1), (h, c)


def parameters_of(hidden_size: int, n_in: int) -> int:
    """An LSTMCore's weights: four gates' input and recurrent matrices and their two biases."""
    return 4 * hidden_size * (n_in + hidden_size + 2)

