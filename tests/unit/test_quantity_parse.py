"""Resource quantities read as the API server reads them: resource.ParseQuantity in
k8s.io/apimachinery/pkg/api/resource/quantity.go (its exponent through suffix.go's interpret,
strconv.ParseInt(_, 10, 64) then int32(parsed)). Pod validation (ValidateResourceQuantityValue,
pkg/apis/core/validation) then checks only the sign and whole counts, so what parses is accepted."""
from __future__ import annotations

from decimal import Decimal

import pytest
from kuberl.core.rules import parse_spec
from kuberl.core.validation import (
    MAX_QUANTITY,
    QUANTITY_SUFFIX_ERROR,
    InvalidJob,
    quantity_value,
    resources_problems,
)
from kuberl.tools.convert import NotConvertible
from kuberl.tools.trainjob import convert_trainjob
from test_trainjob import IMAGE, trainjob

from tests.support.coreschema import quantity_error


@pytest.mark.parametrize(('text', 'value'), [
    ('999999999999Ei', MAX_QUANTITY),   # binarySI: capped, silently, at 2^63-1 ("8Ei parses as 2^63-1")
    ('8Ei', MAX_QUANTITY),
    ('-999999999999Ei', -MAX_QUANTITY),  # the cap is on the magnitude, the sign put back after
    ('1e999', Decimal('1e999')),        # a decimal amount is not capped
    ('1000E', Decimal('1e21')),
    ('1e-999', Decimal('1e-9')),        # rounded away from zero to a nano: "0.9n becomes 1n"
    ('0.9n', Decimal('1e-9')),
    ('-0.9n', Decimal('-1e-9')),
    ('1.5Gi', 1610612736),
    ('500m', Decimal('0.5')),
    ('1e4294967296', 1),                # int32(parsed): 2^32 wraps to 0
    ('1e-2147483649', Decimal('1e2147483647')),  # and -2^31-1 to 2^31-1
])
def test_a_quantity_has_the_value_parse_quantity_gives_it(text, value):
    got = quantity_value(text)
    assert got == value and got.is_finite()


def test_an_exponent_past_int64_is_refused_as_the_server_refuses_it():
    with pytest.raises(ValueError, match=QUANTITY_SUFFIX_ERROR):
        quantity_value('1e9223372036854775808')
    assert quantity_value('1e-9223372036854775808') == 1  # ParseInt's least int64, whose int32 is 0
    problems = resources_problems({'limits': {'memory': '1e99999999999999999999', 'cpu': '1e999'}})
    assert [p.path for p in problems] == ['spec.resources.limits.memory']
    assert 'exponent' in problems[0].message and "unable to parse quantity's suffix" in problems[0].message


def test_checkpoint_size_and_shm_size_with_an_exponent_past_int64_are_refused_by_field():
    """The PVC's storage request and the /dev/shm emptyDir's sizeLimit match their patterns, but the server's
    ParseQuantity refuses the PVC or pod the operator creates from them, after the job was accepted."""
    huge = '1e9223372036854775808'
    assert quantity_error(huge) is not None  # the stand-in's reading of ParseQuantity refuses it too
    job = {'algorithm': 'ppo', 'env': {'id': 'CartPole-v1'}, 'totalTimesteps': 1000,
           'checkpoint': {'size': huge}, 'shmSize': huge}
    with pytest.raises(InvalidJob) as refused:
        parse_spec(job)
    assert {p.path: 'exponent' in p.message for p in refused.value.problems} == {
        'spec.checkpoint.size': True, 'spec.shmSize': True}
    parsed = parse_spec({**job, 'checkpoint': {'size': '1e999'}, 'shmSize': '1e-9223372036854775808'})  # they parse
    assert (parsed.checkpoint.size, parsed.shm_size) == ('1e999', '1e-9223372036854775808')


def test_a_huge_cpu_count_converts_to_a_refusal_not_a_crash():
    """Trainer's auto process count, one per CPU of resourcesPerNode: math.ceil of 1e9999999 as an int was
    OverflowError (the value was Infinity) and 1e999 a thousand-digit count; both are capped before the count."""
    for cpu in ('1e9999999', '1e999', '999999999999Ei'):
        with pytest.raises(NotConvertible, match=r'expected at most \d+ \(got 9223372036854775807\)'):
            convert_trainjob(trainjob(image=IMAGE, resourcesPerNode={'limits': {'cpu': cpu}}))


NUMBERS = ('0', '1', '1.', '1.5', '.5', '007', '-2', '+3', '123456789012345678901')
SUFFIXES = ('', 'm', 'n', 'k', 'E', 'Ki', 'Ei', 'e3', 'E-2', 'e+10', 'e-12', 'e4294967296', 'e9223372036854775807',
            'e9223372036854775808', 'e-9223372036854775808', 'e-9223372036854775809', 'e00000000000000000000001')


def test_kuberl_and_the_stand_in_refuse_the_same_quantities():
    """Both read ParseQuantity's rules, each written from its source apart (core/validation.quantity_value for
    kuberl validate and the operator, tests/support/coreschema.quantity_error for the stand-in's pods): a job kuberl
    passes is never a pod the stand-in refuses, nor the other way round."""
    disagree = []
    for text in (number + suffix for number in NUMBERS for suffix in SUFFIXES):
        try:
            kuberl_refuses = quantity_value(text) is None
        except ValueError:
            kuberl_refuses = True
        if kuberl_refuses != (quantity_error(text) is not None):
            disagree.append((text, kuberl_refuses, quantity_error(text)))
    assert disagree == []
