"""Admission refusals for the stand-in, answered as a real API server answers them.

A test makes the stand-in refuse creates with `store.hooks.admission.append(Refuse(...))`. The
stand-in calls its admission hooks on create after the object passed validation, as the real
server runs validating admission after the object's own validation. Each builder below gives the
status code, reason and message of the Kubernetes source named in it (v1.32):

- `apierrors.NewForbidden` (staging/src/k8s.io/apimachinery/pkg/api/errors/errors.go) formats
  `<resource> "<name>" is forbidden: <err>`, 403, reason Forbidden, details {name, group, kind};
  `admission.NewForbidden` (staging/src/k8s.io/apiserver/pkg/admission/errors.go) passes the
  request's resource and name to it. Every built-in admission plugin refuses through it.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tests.support.resources import ResourceType
from tests.support.store import ApiError

Answer = Callable[[ResourceType, str], ApiError]


def forbidden(rtype: ResourceType, name: str, cause: str, code: int = 403, reason: str = 'Forbidden') -> ApiError:
    """apierrors.NewForbidden(qualifiedResource, name, err)."""
    return ApiError(code, reason, f'{rtype.qualified} "{name}" is forbidden: {cause}',
                    {'name': name, 'group': rtype.group, 'kind': rtype.plural})


def quota_exceeded(quota: str = 'compute-resources', requested: str = 'pods=1', used: str = 'pods=4',
                   limited: str = 'pods=4') -> Answer:
    """ResourceQuota (staging/src/k8s.io/apiserver/pkg/admission/plugin/resourcequota/controller.go,
    CheckRequest): admission.NewForbidden(a, fmt.Errorf("exceeded quota: %s, requested: %s, used: %s,
    limited: %s", ...)) — 403 Forbidden."""
    return lambda rtype, name: forbidden(
        rtype, name, f'exceeded quota: {quota}, requested: {requested}, used: {used}, limited: {limited}')


def pod_security(level: str = 'baseline:latest', detail: str = 'host namespaces (hostNetwork=true)') -> Answer:
    """Pod Security Admission (staging/src/k8s.io/pod-security-admission/admission/admission.go,
    EvaluatePod): forbiddenResponse(attrs, fmt.Errorf("violates PodSecurity %q: %s", level,
    result.ForbiddenDetail())) — 403 Forbidden."""
    return lambda rtype, name: forbidden(rtype, name, f'violates PodSecurity "{level}": {detail}')


def limit_ranger(detail: str = 'maximum cpu usage per Container is 1, but limit is 2') -> Answer:
    """LimitRanger (plugin/pkg/admission/limitranger/admission.go, ValidateLimitRange / PodValidateLimitFunc):
    admission.NewForbidden(a, utilerrors.NewAggregate(errs)); the per-container message is
    fmt.Sprintf("maximum %s usage per %s is %s, but limit is %s", ...) — 403 Forbidden."""
    return lambda rtype, name: forbidden(rtype, name, detail)


def webhook_denial(webhook: str = 'deny.policy.example.com', message: str = 'GPU pods need a team label',
                   code: int = 0) -> Answer:
    """A validating webhook that answers allowed: false (staging/src/k8s.io/apiserver/pkg/admission/plugin/
    webhook/errors/statuserror.go, ToStatusErr): the webhook's own Status, its code raised to 400 when
    it set none below 400, message `admission webhook %q denied the request: <message>`, no reason."""
    def answer(rtype: ResourceType, name: str) -> ApiError:
        return ApiError(max(code, 400), '', f'admission webhook "{webhook}" denied the request: {message}')
    return answer


def validating_admission_policy(policy: str = 'no-host-network', binding: str = 'no-host-network-binding',
                                message: str = 'failed expression: !object.spec.hostNetwork') -> Answer:
    """ValidatingAdmissionPolicy (staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/validating/
    dispatcher.go): admission.NewForbidden(a, "ValidatingAdmissionPolicy '%s' with binding '%s' denied
    request: %s") with reason and code replaced: reason Invalid and 422 when the policy sets no reason."""
    def answer(rtype: ResourceType, name: str) -> ApiError:
        error = forbidden(rtype, name, f"ValidatingAdmissionPolicy '{policy}' with binding '{binding}' denied request: {message}",
                          code=422, reason='Invalid')
        error.details['causes'] = [{'message': error.message.split('is forbidden: ', 1)[1]}]
        return error
    return answer


def webhook_unreachable(webhook: str = 'policy.example.com') -> Answer:
    """A validating webhook with failurePolicy Fail that cannot be called (staging/src/k8s.io/apiserver/pkg/admission/
    plugin/webhook/validating/dispatcher.go: apierrors.NewInternalError(err) of a webhookutil.ErrCallingWebhook,
    whose Error() is `failed calling webhook %q: %v`, util/webhook/error.go) — 500 InternalError."""
    def answer(rtype: ResourceType, name: str) -> ApiError:
        return ApiError(500, 'InternalError', f'Internal error occurred: failed calling webhook "{webhook}": failed to call '
                        f'webhook: Post "https://{webhook}:443/validate?timeout=10s": dial tcp 10.96.0.42:443: connect: connection refused')
    return answer


OPERATOR_USER = 'system:serviceaccount:kuberl-system:kuberl-operator'


def rbac_forbidden(verb: str, rtype: ResourceType, namespace: str | None, name: str = '', user: str = OPERATOR_USER,
                   subresource: str = '') -> ApiError:
    """The RBAC authorizer's refusal, as WithAuthorization answers it before any handler runs
    (staging/src/k8s.io/apiserver/pkg/endpoints/filters/authorization.go -> responsewriters.Forbidden,
    staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/errors.go): forbiddenMessage's
    "User %q cannot %s resource %q in API group %q in the namespace %q" (or "at the cluster scope"),
    wrapped by apierrors.NewForbidden(groupResource, name, err): `<resource>[ "<name>"] is forbidden: ...`,
    403, reason Forbidden, details {name, group, kind}. A watch is refused the same way, as a plain 403
    answer: authorization runs before the watch is served, so no ERROR event is involved."""
    resource = f'{rtype.plural}/{subresource}' if subresource else rtype.plural
    where = f'in the namespace "{namespace}"' if namespace else 'at the cluster scope'
    cause = f'User "{user}" cannot {verb} resource "{resource}" in API group "{rtype.group}" {where}'
    subject = f'{rtype.qualified} "{name}"' if name else rtype.qualified
    details = {'name': name, 'group': rtype.group, 'kind': rtype.plural} if name else {'group': rtype.group, 'kind': rtype.plural}
    return ApiError(403, 'Forbidden', f'{subject} is forbidden: {cause}', details)


def rbac_denial(user: str = OPERATOR_USER, verb: str = 'create', namespace: str = 'default') -> Answer:
    """rbac_forbidden for a create (the name is not in the URL, so `<resource> is forbidden: ...`). The
    real server refuses before admission; through this hook it refuses what reaches admission, which
    for a valid object is the same answer."""
    return lambda rtype, name: rbac_forbidden(verb, rtype, namespace, user=user)


@dataclass
class Refuse:
    """Refuse creates of `plural` objects whose labels include `labels`, with `answer`; `times`
    refusals in all (None: until removed). `refused` counts the refusals given."""

    plural: str
    answer: Answer
    labels: dict[str, str] = field(default_factory=dict)
    times: int | None = None
    refused: int = 0

    def __call__(self, rtype: ResourceType, obj: dict) -> None:
        meta = obj.get('metadata') or {}
        if rtype.plural != self.plural or not self.labels.items() <= (meta.get('labels') or {}).items():
            return
        if self.times is not None and self.refused >= self.times:
            return
        self.refused += 1
        raise self.answer(rtype, meta.get('name', ''))
