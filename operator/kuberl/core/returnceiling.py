"""The most an episode of a registered gymnasium env can return, where its rewards are known, so that
`kuberl validate` and `kuberl run` warn of a spec.success.targetReturn that no evaluation can reach: such a
run never stops early and spends all of spec.totalTimesteps (Acrobot-v1 from the CartPole example's 475).

A warning, never a refusal: a "module:Class" env or a reward wrapper of the user's own gives other returns,
and an env's rewards are known here only by its entry point (REWARDS). Pure: the caller reads gymnasium's
registry (envspaces.target_ceiling_problem).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .validation import Problem


@dataclass(frozen=True)
class Rewards:
    """What an env's own code gives, read from its source. `per_step`: the most one step gives, summed
    over at most max_episode_steps steps; else `episode`: the most a whole episode gives, however long.
    `changed_by`: kwargs of the env that change its rewards (with one of them set, nothing is claimed)."""
    why: str
    per_step: float | None = None
    episode: float | None = None
    changed_by: tuple[str, ...] = ()


_CLASSIC = "gymnasium.envs.classic_control."
_TOY = "gymnasium.envs.toy_text."
# Entry points of gymnasium's registry (1.x), each row read from that env's step(); a new env is a row.
REWARDS: dict[str, Rewards] = {
    _CLASSIC + "cartpole:CartPoleEnv": Rewards("+1 a step", per_step=1.0, changed_by=("sutton_barto_reward",)),
    _CLASSIC + "acrobot:AcrobotEnv": Rewards("-1 a step, 0 at the goal: never positive", episode=0.0),
    _CLASSIC + "mountain_car:MountainCarEnv": Rewards("-1 a step: never positive", episode=0.0),
    _CLASSIC + "continuous_mountain_car:Continuous_MountainCarEnv": Rewards("100 at the goal, less the actions' cost",
                                                                            episode=100.0),
    _CLASSIC + "pendulum:PendulumEnv": Rewards("a cost each step: never positive", episode=0.0),
    _TOY + "frozen_lake:FrozenLakeEnv": Rewards("1 at the goal, else 0", episode=1.0, changed_by=("reward_schedule",)),
    _TOY + "cliffwalking:CliffWalkingEnv": Rewards("-1 a step, -100 off the cliff: never positive", episode=0.0),
    _TOY + "taxi:TaxiEnv": Rewards("+20 for the drop-off that ends it, -1 a step", episode=20.0),
    _TOY + "blackjack:BlackjackEnv": Rewards("+1 for a win", episode=1.0, changed_by=("natural", "sab")),
}


ALE = "ale_py.env:AtariEnv"
# ALE's games, by the `game` their registration passes (one entry point makes them all). Pong: a point is +1 or -1,
# and a game ends when a side reaches 21. Other games' scores have no bound this exact.
GAMES: dict[str, Rewards] = {
    "pong": Rewards("+1 a point won, -1 a point lost, the game over at 21 points", episode=21.0),
}


def rewards_of(entry_point: str, kwargs: Mapping[str, Any]) -> Rewards | None:
    """The row of an env made from `entry_point` with `kwargs` (its registration's, then spec.env.kwargs)."""
    if entry_point == ALE:
        game = kwargs.get("game")
        return GAMES.get(game) if isinstance(game, str) else None
    return REWARDS.get(entry_point)


@dataclass(frozen=True)
class Ceiling:
    """The most an episode returns (`value`), and why (`why`, the env's rewards and its step limit)."""
    value: float
    why: str
    per_step: bool  # the ceiling grows with max_episode_steps


def return_ceiling(entry_point: str, max_episode_steps: Any, kwargs: Mapping[str, Any],
                   registered: Mapping[str, Any] | None = None) -> Ceiling | None:
    """The ceiling of an env made from `entry_point` (its registration's, with its `registered` kwargs) with `kwargs`
    (spec.env.kwargs: a `max_episode_steps` there replaces the registered one, as gym.make takes it); None where its
    rewards are not known here, are changed by those kwargs, or add up without a step limit."""
    rewards = rewards_of(entry_point, {**(registered or {}), **kwargs})
    if rewards is None or any(name in kwargs for name in rewards.changed_by):
        return None
    if rewards.episode is not None:
        return Ceiling(rewards.episode, rewards.why, per_step=False)
    steps = kwargs.get("max_episode_steps", max_episode_steps)
    if rewards.per_step is None or isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        return None
    where = "spec.env.kwargs." if "max_episode_steps" in kwargs else "its registered "
    return Ceiling(rewards.per_step * steps, f"{rewards.why} for at most {steps:,} steps, {where}max_episode_steps",
                   per_step=True)


def target_problem(target: float | None, env_id: str, ceiling: Ceiling | None) -> Problem | None:
    """A warning (as a Problem at spec.success.targetReturn) when `target` is above what `env_id` can return;
    None when it can be reached, or the ceiling is not known. The trainer stops at an eval return >= target."""
    if target is None or ceiling is None or target <= ceiling.value:
        return None
    advice = "lower it, or raise spec.env.kwargs.max_episode_steps" if ceiling.per_step else "lower it"
    return Problem("spec.success.targetReturn",
                   f"{target:g} is above the most an episode of {env_id} returns, {ceiling.value:g} ({ceiling.why}):"
                   f" no evaluation reaches it, so the run never stops early and trains all of spec.totalTimesteps;"
                   f" {advice}")
