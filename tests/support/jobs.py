"""One RLTrainingJob builder for every tier, in the style of JobSet's `testutils.MakeJobSet(...).Obj()`.

    make_job('happy').workers(3).run_policy(backoffLimit=0).obj()     # the manifest, as kubectl sends it
    make_job().workers(64).spec()                                      # the parsed, defaulted JobSpec

The defaults are the smallest valid job (PPO on CartPole, 2 workers, 1000 timesteps); a test states
only the fields that matter to it. Builders never mutate what they were given: `obj()` is a copy.
"""
from __future__ import annotations

import copy
from typing import Any, Self

from kuberl.core import names
from kuberl.core.rules import parse_spec
from kuberl.core.spec import JobSpec


def _merged(base: dict, fields: dict) -> dict:
    """`fields` over `base`, dicts merged key by key (so run_policy(x=1) keeps the other run policy fields)."""
    out = copy.deepcopy(base)
    for key, value in fields.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


DELETE = object()  # with_field's value that removes the field


def with_field(doc: dict, path: str, value: Any) -> dict:
    """A copy of `doc` with the field at the dotted `path` ("spec.ppo.learningRate") set to `value`, or removed
    where `value` is DELETE; the objects on the way made where missing. `doc` itself is not touched."""
    out = copy.deepcopy(doc)
    *parents, last = path.split(".")
    node = out
    for key in parents:
        node = node.setdefault(key, {})
    if value is DELETE:
        node.pop(last, None)
    else:
        node[last] = value
    return out


class JobBuilder:
    def __init__(self, name: str = 'job', namespace: str | None = None):
        self.name, self.namespace = name, namespace
        self.body: dict[str, Any] = {'algorithm': 'ppo', 'env': {'id': 'CartPole-v1', 'numEnvs': 2},
                                     'totalTimesteps': 1000, 'workers': 2}

    def minimal(self) -> Self:
        """Start from the smallest valid document instead of the defaults: algorithm, env id and budget only
        (workers and numEnvs left to the operator's defaults), as a user would first write it."""
        self.body = {'algorithm': 'ppo', 'env': {'id': 'CartPole-v1'}, 'totalTimesteps': 1000}
        return self

    def from_spec(self, body: dict) -> Self:
        """Start from a tier's own base job (e.g. tests/e2e/jobs/tiny.yaml's spec) instead of the defaults."""
        self.body = copy.deepcopy(body)
        return self

    def replace(self, **fields: Any) -> Self:
        """Spec fields set whole, not merged (a dict given replaces the one there)."""
        self.body.update(copy.deepcopy(fields))
        return self

    def with_spec(self, **fields: Any) -> Self:
        """Any spec fields, camelCase as in the CRD; dicts are merged into what is there."""
        self.body = _merged(self.body, fields)
        return self

    def without(self, *fields: str) -> Self:
        for key in fields:
            self.body.pop(key, None)
        return self

    def algorithm(self, name: str, **hyperparameters: Any) -> Self:
        """`algorithm: name` and its block (`dqn: {...}`), merged into any block there; written even when empty."""
        return self.with_spec(algorithm=name, **{name: hyperparameters})

    def env(self, env_id: str, **fields: Any) -> Self:
        """spec.env set whole: env('CartPole-v1') is the id alone, without the default numEnvs."""
        return self.replace(env={'id': env_id, **fields})

    def custom_trainer(self, template: dict) -> Self:
        """trainer: custom, its command in `template`: no algorithm, env or budget of kuberl's."""
        self.without('algorithm', 'env', 'totalTimesteps')
        self.body = {'trainer': 'custom', **self.body}
        return self.template(template)

    def workers(self, count: int) -> Self:
        return self.with_spec(workers=count)

    def run_policy(self, **fields: Any) -> Self:
        return self.with_spec(runPolicy=fields)

    def template(self, template: dict) -> Self:
        return self.with_spec(template=template)

    def metrics_port(self, port: int) -> Self:
        return self.with_spec(metrics={'port': port})

    def queue(self, name: str) -> Self:
        return self.with_spec(queueName=name)

    def obj(self) -> dict:
        metadata: dict[str, Any] = {'name': self.name}
        if self.namespace:
            metadata['namespace'] = self.namespace
        return {'apiVersion': names.API_VERSION, 'kind': names.KIND, 'metadata': metadata, 'spec': copy.deepcopy(self.body)}

    def spec(self) -> JobSpec:
        return parse_spec(copy.deepcopy(self.body))


def make_job(name: str = 'job', namespace: str | None = None) -> JobBuilder:
    return JobBuilder(name, namespace)
