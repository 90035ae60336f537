"""What a hostile spec.template cannot change in the pods kuberl renders: the labels, annotations
and identity the operator, the Service, the NetworkPolicy and the gang scheduler rely on."""

import pytest
from kuberl.core import names
from kuberl.core.render import PLACEHOLDER_UID, render_job

from tests.support.jobs import make_job


def rendered(job: dict) -> tuple[list[dict], dict]:
    objects = render_job(job, "team-a", PLACEHOLDER_UID)
    return [o for o in objects if o["kind"] == "Pod"], next(o for o in objects if o["kind"] == "ConfigMap")


# The gang scheduler counts a pod group by these (Kueue's pod integration: pod-group-total-count;
# Volcano: scheduling.k8s.io/group-name names the PodGroup): a template that overrides them claims
# a smaller gang than it runs, or puts its pods into another job's PodGroup in the namespace.
OVERRIDES = {
    "kueue total count": ({"queueName": "team-a"}, names.KUEUE_POD_GROUP_TOTAL_COUNT, "1", "3"),
    "volcano group of another job": ({"schedulerName": "volcano"}, names.VOLCANO_GROUP_NAME, "victim-gang", "hog-gang"),
    "config hash": ({}, names.ANNOTATION_SPEC_HASH, "0" * 64, None),
}


@pytest.mark.parametrize(("spec", "key", "forged", "kept"), OVERRIDES.values(), ids=OVERRIDES.keys())
def test_kuberl_annotations_win_over_the_template(spec, key, forged, kept):
    job = make_job("hog").workers(3).with_spec(**spec).template({"metadata": {"annotations": {key: forged, "team": "rl"}}}).obj()
    pods, configmap = rendered(job)
    kept = kept or configmap["metadata"]["annotations"][names.ANNOTATION_SPEC_HASH]
    assert [p["metadata"]["annotations"][key] for p in pods] == [kept] * 3
    assert all(p["metadata"]["annotations"]["team"] == "rl" for p in pods), "the template's own annotations stay"
