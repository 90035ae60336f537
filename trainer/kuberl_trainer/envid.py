"""The error for a spec.env the trainer cannot run. `envs` and `atari` both raise it; it lives
apart from both so that `atari` needs nothing of `envs`, which imports it (no import cycle)."""


class UnknownEnv(ValueError):
    """spec.env.id names no registered env and no importable "module:Class"."""
