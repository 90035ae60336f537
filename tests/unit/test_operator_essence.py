"""What kopf does on the event loop for every event of a job, besides poking its daemon."""
import copy

import kopf
from kuberl.operator import handlers

from tests.support.jobs import make_job
from tests.unit.test_hostile_spec import nested_kwargs


def test_an_event_of_the_largest_spec_is_not_deep_copied_on_the_event_loop(monkeypatch):
    """kopf's default essence of each event was two deep copies of the whole job (spec and status), for
    create/update handlers kuberl does not have: 40 ms on the event loop per event of the largest spec
    that passes (env.kwargs 40 lists deep, bench/operator_scale.py), every other job waiting meanwhile;
    each of the job's own status writes is such an event."""
    job = make_job("big").env("CartPole-v1", kwargs=nested_kwargs(21_000)).obj()
    job["metadata"].update(namespace="team-a", uid="u-1", generation=3)
    job["status"] = {"phase": "Running", "observedGeneration": 3}
    settings = kopf.OperatorSettings()
    handlers.configure_persistence(settings)
    copied = []
    deepcopy = copy.deepcopy
    monkeypatch.setattr(copy, "deepcopy", lambda value, memo=None: copied.append(value) or deepcopy(value, memo))
    storages = settings.persistence
    essence = storages.progress_storage.clear(essence=storages.diffbase_storage.build(body=kopf.Body(job)))
    assert essence == {"metadata": {"generation": 3}}
    assert not any(value is job["spec"] or value is job["spec"]["env"]["kwargs"] for value in copied)
    assert storages.diffbase_storage.fetch(body=kopf.Body(job)) is None  # nothing kopf writes to the job
