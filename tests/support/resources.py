"""What the stand-in serves: resource types, and the built-in kinds' own rules (names, immutability)."""
import decimal
import ipaddress
import re
from dataclasses import dataclass, field

from tests.support import coreschema, crdschema
from tests.support.crdschema import CustomSchema, FieldError

# k8s.io/apimachinery/pkg/util/validation/validation.go: each is compiled "^" + fmt + "$" and used with
# MatchString; Go's $ is the end of the text, so every check here is a fullmatch (Python's $ also matches
# before a final line break: "worker\n" passed as a label value the real server refuses).
DNS1123_LABEL = re.compile(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')
DNS1123_SUBDOMAIN = re.compile(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')
DNS1035_LABEL = re.compile(r'^[a-z]([-a-z0-9]*[a-z0-9])?$')
LABEL_VALUE = re.compile(r'^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$')
LABEL_NAME = re.compile(r'^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$')

ANNOTATIONS_LIMIT = 256 * 1024
CONFIGMAP_LIMIT = 1024 * 1024  # core.MaxSecretSize
OBJECT_LIMIT = 1536 * 1024  # etcd's default request size limit

COMMON_FIELDS = frozenset({'metadata.name', 'metadata.namespace'})


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    extra_fields: frozenset[str] = frozenset()
    schema: CustomSchema | None = field(default=None, compare=False, hash=False)
    printer_columns: tuple = field(default=(), compare=False, hash=False)
    custom: bool = False

    @property
    def key(self) -> tuple[str, str]:
        return self.group, self.plural

    @property
    def api_version(self) -> str:
        return f'{self.group}/{self.version}' if self.group else self.version

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def qualified(self) -> str:
        """The name errors use: `pods`, `rltrainingjobs.kuberl.dev`."""
        return f'{self.plural}.{self.group}' if self.group else self.plural

    @property
    def kind_qualified(self) -> str:
        """The name 422 messages use: `Pod`, `RLTrainingJob.kuberl.dev`."""
        return f'{self.kind}.{self.group}' if self.group else self.kind

    @property
    def field_selectors(self) -> frozenset[str]:
        return COMMON_FIELDS | self.extra_fields

    @property
    def has_status(self) -> bool:
        return 'status' in self.subresources

    @property
    def unconditional_update(self) -> bool:
        """Custom resources refuse a PUT without metadata.resourceVersion; built-ins accept it."""
        return not self.custom


EVENT_FIELDS = frozenset({
    'involvedObject.kind', 'involvedObject.namespace', 'involvedObject.name', 'involvedObject.uid',
    'involvedObject.apiVersion', 'involvedObject.resourceVersion', 'involvedObject.fieldPath',
    'reason', 'reportingComponent', 'source', 'type',
})

BUILTINS = (
    ResourceType('', 'v1', 'pods', 'Pod', short_names=('po',), categories=('all',),
                 subresources=('status', 'eviction', 'binding', 'log'),
                 extra_fields=frozenset({'spec.nodeName', 'spec.restartPolicy', 'spec.schedulerName',
                                         'spec.serviceAccountName', 'status.phase', 'status.podIP',
                                         'status.nominatedNodeName', 'spec.hostNetwork'})),
    ResourceType('', 'v1', 'services', 'Service', short_names=('svc',), categories=('all',), subresources=('status',)),
    ResourceType('', 'v1', 'endpoints', 'Endpoints', short_names=('ep',)),
    ResourceType('', 'v1', 'configmaps', 'ConfigMap', short_names=('cm',)),
    ResourceType('', 'v1', 'secrets', 'Secret', extra_fields=frozenset({'type'})),
    ResourceType('', 'v1', 'serviceaccounts', 'ServiceAccount', short_names=('sa',)),
    ResourceType('', 'v1', 'persistentvolumeclaims', 'PersistentVolumeClaim', short_names=('pvc',), subresources=('status',)),
    ResourceType('', 'v1', 'events', 'Event', short_names=('ev',), extra_fields=EVENT_FIELDS),
    ResourceType('', 'v1', 'namespaces', 'Namespace', namespaced=False, short_names=('ns',),
                 subresources=('status', 'finalize'), extra_fields=frozenset({'status.phase'})),
    ResourceType('', 'v1', 'nodes', 'Node', namespaced=False, short_names=('no',), subresources=('status',),
                 extra_fields=frozenset({'spec.unschedulable'})),
    ResourceType('events.k8s.io', 'v1', 'events', 'Event', short_names=('ev',),
                 extra_fields=frozenset({'regarding.kind', 'regarding.namespace', 'regarding.name', 'regarding.uid',
                                         'reason', 'reportingController', 'type'})),
    ResourceType('networking.k8s.io', 'v1', 'networkpolicies', 'NetworkPolicy', short_names=('netpol',)),
    ResourceType('coordination.k8s.io', 'v1', 'leases', 'Lease'),
    ResourceType('scheduling.k8s.io', 'v1', 'priorityclasses', 'PriorityClass', namespaced=False, short_names=('pc',)),
    ResourceType('policy', 'v1', 'poddisruptionbudgets', 'PodDisruptionBudget', short_names=('pdb',), subresources=('status',)),
    ResourceType('apiextensions.k8s.io', 'v1', 'customresourcedefinitions', 'CustomResourceDefinition',
                 namespaced=False, short_names=('crd', 'crds'), subresources=('status',), categories=('api-extensions',)),
)


def custom_types(crd: dict) -> list[ResourceType]:
    """The ResourceTypes a CRD serves, one per served version."""
    spec = crd['spec']
    names = spec['names']
    result = []
    for version in spec['versions']:
        if not version.get('served', True):
            continue
        schema = (version.get('schema') or {}).get('openAPIV3Schema') or {'type': 'object', 'x-kubernetes-preserve-unknown-fields': True}
        selectable = frozenset(f['jsonPath'].lstrip('.') for f in version.get('selectableFields', []))
        result.append(ResourceType(
            spec['group'], version['name'], names['plural'], names['kind'],
            namespaced=spec.get('scope', 'Namespaced') == 'Namespaced',
            short_names=tuple(names.get('shortNames', [])),
            subresources=tuple((version.get('subresources') or {}).keys()),
            categories=tuple(names.get('categories', [])),
            extra_fields=selectable,
            schema=CustomSchema(schema),
            printer_columns=tuple(version.get('additionalPrinterColumns', [])),
            custom=True,
        ))
    return result


# ---------------------------------------------------------------- built-in validation

def validate_name(rtype: ResourceType, name: str) -> list[FieldError]:
    rule, explain = DNS1123_SUBDOMAIN, ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
                                       "'-' or '.', and must start and end with an alphanumeric character")
    limit = 253
    if rtype.plural in ('services',):
        rule, limit = DNS1035_LABEL, 63
        explain = ("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
                   "alphabetic character, and end with an alphanumeric character")
    elif rtype.plural in ('namespaces',):
        rule, limit = DNS1123_LABEL, 63
        explain = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
                   "start and end with an alphanumeric character")
    errors = []
    if len(name) > limit:
        errors.append(FieldError('FieldValueInvalid', 'metadata.name', f'must be no more than {limit} characters', name))
    if not rule.fullmatch(name):
        errors.append(FieldError('FieldValueInvalid', 'metadata.name', explain, name))
    return errors


def validate_labels(metadata: dict) -> list[FieldError]:
    errors = []
    for key, value in (metadata.get('labels') or {}).items():
        prefix, _, name = key.rpartition('/')
        if not LABEL_NAME.fullmatch(name) or len(name) > 63 or (prefix and not DNS1123_SUBDOMAIN.fullmatch(prefix)):
            errors.append(FieldError('FieldValueInvalid', 'metadata.labels', "name part must consist of alphanumeric "
                                     "characters, '-', '_' or '.', and must start and end with an alphanumeric character", key))
        if not isinstance(value, str) or len(value) > 63 or not LABEL_VALUE.fullmatch(value):
            errors.append(FieldError('FieldValueInvalid', 'metadata.labels', "a valid label must be an empty string or "
                                     "consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
                                     "alphanumeric character", value))
    return errors


def qualified_name_problem(key: str) -> str | None:
    """IsQualifiedName (k8s.io/apimachinery/pkg/util/validation/validation.go): an optional DNS-1123
    subdomain prefix and '/', then a name part of at most 63 characters; its first complaint."""
    prefix, slash, name = key.rpartition('/')
    if slash and not prefix:
        return 'prefix part must be non-empty'
    if prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.fullmatch(prefix)):
        return ("prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
                "'-' or '.', and must start and end with an alphanumeric character")
    if not name:
        return 'name part must be non-empty'
    if len(name) > 63:
        return 'name part must be no more than 63 characters'
    if not LABEL_NAME.fullmatch(name):
        return ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
                "alphanumeric character")
    return None


# helper.IsStandardFinalizerName (pkg/apis/core/helper): core's own, and metav1's FinalizerOrphanDependents and
# FinalizerDeleteDependents
STANDARD_FINALIZERS = frozenset({'kubernetes', 'orphan', 'foregroundDeletion'})


def validate_finalizers(finalizers: list, builtin: bool) -> list[FieldError]:
    """metadata.finalizers. Every kind: ValidateFinalizers (k8s.io/apimachinery/pkg/api/validation/objectmeta.go),
    each name a qualified name (ValidateFinalizerName: IsQualifiedName, Invalid at metadata.finalizers), orphan and
    foregroundDeletion not both. A built-in kind also passes core's ValidateObjectMeta (pkg/apis/core/validation,
    validateKubeFinalizerName): a name without '/' must be a standard one, else Invalid at metadata.finalizers[i]. A
    custom resource is only warned of that (custom_finalizer_warnings)."""
    errors = []
    for index, name in enumerate(finalizers):
        problem = qualified_name_problem(str(name))
        if problem:
            errors.append(FieldError('FieldValueInvalid', 'metadata.finalizers', problem, name))
        if builtin and '/' not in str(name) and name not in STANDARD_FINALIZERS:
            errors.append(FieldError('FieldValueInvalid', f'metadata.finalizers[{index}]',
                                     'name is neither a standard finalizer name nor is it fully qualified', name))
    if 'orphan' in finalizers and 'foregroundDeletion' in finalizers:
        errors.append(FieldError('FieldValueInvalid', 'metadata.finalizers',
                                 'finalizer orphan and foregroundDeletion cannot be both set', finalizers))
    return errors


def custom_finalizer_warnings(finalizers: list, old: list | None = None) -> list[str]:
    """What a custom resource's create or update warns of (apiextensions-apiserver pkg/registry/customresource:
    strategy.go generateWarningsFromObj, validator.go validateKubeFinalizerName): each finalizer it adds (all of them
    on create, in sorted order) that has no '/' and is not a standard one; accepted all the same. (Names that are not
    qualified are warned of too, but refused first by ValidateFinalizers, so no warning reaches the client.)"""
    added = sorted(set(map(str, finalizers)) - set(map(str, old or [])))
    return [f'metadata.finalizers: "{name}": prefer a domain-qualified finalizer name to avoid accidental conflicts'
            ' with other finalizer writers' for name in added if '/' not in name and name not in STANDARD_FINALIZERS]


def validate_metadata(metadata: dict, builtin: bool = True) -> list[FieldError]:
    """Labels, annotations (keys and total size), finalizers and ownerReferences, checked for every kind; `builtin`:
    a kind the core API validates (stricter finalizer names)."""
    errors = validate_labels(metadata)
    errors += validate_finalizers(list(metadata.get('finalizers') or []), builtin)
    annotations = metadata.get('annotations') or {}
    # ValidateAnnotations (k8s.io/apimachinery/pkg/api/validation/objectmeta.go): every key a qualified
    # name, case aside (IsQualifiedName(strings.ToLower(k))), as Invalid at metadata.annotations.
    for key in annotations:
        problem = qualified_name_problem(str(key).lower())
        if problem:
            errors.append(FieldError('FieldValueInvalid', 'metadata.annotations', problem, key))
    size = sum(len(str(k).encode()) + len((v if isinstance(v, str) else str(v)).encode()) for k, v in annotations.items())
    if size > ANNOTATIONS_LIMIT:
        errors.append(FieldError('FieldValueTooLong', 'metadata.annotations', f'must have at most {ANNOTATIONS_LIMIT} bytes', size))
    refs = metadata.get('ownerReferences') or []
    for index, ref in enumerate(refs):
        for key in ('apiVersion', 'kind', 'name', 'uid'):
            if not ref.get(key):
                errors.append(FieldError('FieldValueRequired', f'metadata.ownerReferences[{index}].{key}'))
    if sum(1 for ref in refs if ref.get('controller')) > 1:
        errors.append(FieldError('FieldValueInvalid', 'metadata.ownerReferences', 'Only one reference can have Controller set to true', refs))
    return errors


def validate_crd(crd: dict) -> list[FieldError]:
    """What apiextensions refuses in a CRD: non-structural schemas, defaults that fail their own schema,
    CEL rules that do not compile, fieldPaths that name no field, metadata constraints beyond name."""
    errors = []
    spec = crd.get('spec') or {}
    names = spec.get('names') or {}
    expected = f'{names.get("plural")}.{spec.get("group")}'
    if crd.get('metadata', {}).get('name') != expected:
        errors.append(FieldError('FieldValueInvalid', 'metadata.name', 'must be spec.names.plural+"."+spec.group', crd.get('metadata', {}).get('name')))
    if sum(1 for v in spec.get('versions') or [] if v.get('storage')) != 1:
        errors.append(FieldError('FieldValueInvalid', 'spec.versions', 'must have exactly one version marked as storage version', None))
    for index, version in enumerate(spec.get('versions') or []):
        schema = (version.get('schema') or {}).get('openAPIV3Schema')
        path = f'spec.versions[{index}].schema.openAPIV3Schema'
        if schema is None:
            errors.append(FieldError('FieldValueRequired', path, 'schemas are required'))
            continue
        _check_structural(schema, path, errors, root=True)
        metadata = (schema.get('properties') or {}).get('metadata') or {}
        for key in set(metadata.get('properties') or {}) - {'name', 'generateName'}:
            errors.append(FieldError('FieldValueForbidden', f'{path}.properties[metadata].properties[{key}]',
                                     'must not be specified'))
    return errors


def _check_structural(schema: dict, path: str, errors: list[FieldError], root: bool = False) -> None:
    untyped = schema.get('x-kubernetes-int-or-string') or schema.get('x-kubernetes-preserve-unknown-fields')
    if not schema.get('type') and not untyped:
        errors.append(FieldError('FieldValueRequired', f'{path}.type', 'must not be empty for specified object fields'))
    if root and schema.get('type') != 'object':
        errors.append(FieldError('FieldValueInvalid', f'{path}.type', 'must be object at the root', schema.get('type')))
    if schema.get('properties') and isinstance(schema.get('additionalProperties'), dict):
        errors.append(FieldError('FieldValueForbidden', f'{path}.additionalProperties',
                                 'additionalProperties and properties are mutual exclusive'))
    if 'default' in schema:
        value = crdschema.clone_json(schema['default'])
        unknown = crdschema.prune(value, schema)
        problems: list[FieldError] = []
        crdschema.validate(value, schema, f'{path}.default', problems)
        for problem in problems:
            errors.append(FieldError('FieldValueInvalid', f'{path}.default', problem.detail or problem.message, schema['default']))
        if unknown:
            errors.append(FieldError('FieldValueInvalid', f'{path}.default', f'must not have unknown fields {unknown}', schema['default']))
    properties = schema.get('properties') or {}
    for index, rule in enumerate(schema.get('x-kubernetes-validations') or []):
        where = f'{path}.x-kubernetes-validations[{index}]'
        for key in ('rule', 'messageExpression'):
            if rule.get(key):
                try:
                    crdschema.compile_rule(rule[key])
                except Exception as error:  # noqa: BLE001 — any compile failure is the CRD author's error
                    errors.append(FieldError('FieldValueInvalid', f'{where}.{key}', f'compilation failed: {str(error).splitlines()[0]}', rule[key]))
        field_path = rule.get('fieldPath')
        if field_path and not _field_path_exists(schema, field_path):
            errors.append(FieldError('FieldValueInvalid', f'{where}.fieldPath', 'fieldPath must be a valid path', field_path))
    for key, child in properties.items():
        _check_structural(child, f'{path}.properties[{key}]', errors)
    if isinstance(schema.get('items'), dict):
        _check_structural(schema['items'], f'{path}.items', errors)
    if isinstance(schema.get('additionalProperties'), dict):
        _check_structural(schema['additionalProperties'], f'{path}.additionalProperties', errors)


def _field_path_exists(schema: dict, field_path: str) -> bool:
    node = schema
    for key in re.findall(r"\.([A-Za-z0-9_$-]+)|\['([^']+)'\]", field_path):
        name = key[0] or key[1]
        properties = node.get('properties') or {}
        if name in properties:
            node = properties[name]
        elif isinstance(node.get('additionalProperties'), dict):
            node = node['additionalProperties']
        else:
            return False
    return True


def _decoded_length(text: str) -> int:
    """Bytes a base64 value stands for (padding excluded)."""
    text = ''.join(text.split())
    return len(text) * 3 // 4 - (len(text) - len(text.rstrip('=')))


def validate_builtin(rtype: ResourceType, obj: dict, creating: bool = True) -> list[FieldError]:
    """The checks of the built-in kinds a rendering bug would trip over first."""
    errors = []
    if rtype.plural == 'customresourcedefinitions':
        errors += validate_crd(obj)
    if rtype.plural == 'pods':
        spec = obj.get('spec') or {}
        containers = spec.get('containers') or []
        if not containers:
            errors.append(FieldError('FieldValueRequired', 'spec.containers'))
        names = set()
        for kind in ('initContainers', 'containers'):
            for index, container in enumerate(spec.get(kind) or []):
                name = container.get('name', '')
                path = f'spec.{kind}[{index}]'
                if len(name) > 63 or not DNS1123_LABEL.fullmatch(name):  # validateContainerCommon: ValidateDNS1123Label
                    errors.append(FieldError('FieldValueInvalid', f'{path}.name', 'a lowercase RFC 1123 label must consist '
                                             "of lower case alphanumeric characters or '-'", name))
                if name in names:
                    errors.append(FieldError('FieldValueDuplicate', f'{path}.name', value=name))
                names.add(name)
                if not container.get('image'):
                    errors.append(FieldError('FieldValueRequired', f'{path}.image'))
                for env_index, env in enumerate(container.get('env') or []):
                    if 'value' in env and not isinstance(env['value'], str):
                        errors.append(FieldError('FieldValueInvalid', f'{path}.env[{env_index}].value',
                                                 'must be a string', env['value']))
                    elif env.get('value') and env.get('valueFrom') is not None:  # validateEnvVarValueFrom
                        errors.append(FieldError('FieldValueInvalid', f'{path}.env[{env_index}].valueFrom',
                                                 'may not be specified when `value` is not empty', ''))
                errors += _container_field_errors(container, path, init=kind == 'initContainers')
                errors += _resource_requirement_errors(container.get('resources') or {}, f'{path}.resources')
        for key in ('hostname', 'subdomain'):
            if spec.get(key) and (not DNS1123_LABEL.fullmatch(spec[key]) or len(spec[key]) > 63):
                errors.append(FieldError('FieldValueInvalid', f'spec.{key}', 'must be a DNS-1123 label', spec[key]))
        if creating and spec.get('ephemeralContainers'):
            # ValidatePodCreate (pkg/apis/core/validation/validation.go); the integration test
            # test/integration/pods/pods_test.go expects "spec.ephemeralContainers: Forbidden: cannot be set on create".
            errors.append(FieldError('FieldValueForbidden', 'spec.ephemeralContainers', 'cannot be set on create'))
        volumes = {v.get('name') for v in spec.get('volumes') or []}
        for kind in ('initContainers', 'containers'):
            for index, container in enumerate(spec.get(kind) or []):
                for mount_index, mount in enumerate(container.get('volumeMounts') or []):
                    if not mount.get('mountPath'):  # ValidateVolumeMounts: mountPath "Required value"
                        errors.append(FieldError('FieldValueRequired', f'spec.{kind}[{index}].volumeMounts[{mount_index}].mountPath'))
                    if mount.get('name') not in volumes:
                        errors.append(FieldError('FieldValueNotFound', f'spec.{kind}[{index}].volumeMounts[{mount_index}].name',
                                                 'not found', mount.get('name')))
    if rtype.plural == 'persistentvolumeclaims':
        errors += _claim_spec_errors(obj.get('spec') or {})
    if rtype.plural == 'events' and not rtype.group:
        errors += _event_errors(obj)
    if rtype.plural == 'configmaps':
        # ValidateConfigMap (pkg/apis/core/validation/validation.go): the lengths of every data and binaryData
        # value, summed, at most core.MaxSecretSize (1 MiB); field.TooLong(field.NewPath(""), cfg, MaxSecretSize),
        # whose message omits the value. binaryData counts decoded bytes.
        size = sum(len(v.encode()) for v in (obj.get('data') or {}).values() if isinstance(v, str))
        size += sum(_decoded_length(v) for v in (obj.get('binaryData') or {}).values() if isinstance(v, str))
        if size > CONFIGMAP_LIMIT:
            errors.append(FieldError('FieldValueTooLong', '', f'must have at most {CONFIGMAP_LIMIT} bytes'))
    if rtype.plural == 'networkpolicies':
        errors += networkpolicy_spec_errors(obj.get('spec') or {})
    if rtype.plural == 'services':
        for index, port in enumerate((obj.get('spec') or {}).get('ports') or []):
            if not isinstance(port.get('port'), int):
                errors.append(FieldError('FieldValueRequired', f'spec.ports[{index}].port'))
    return errors


def overcommit_allowed(name: str) -> bool:
    """helper.IsOvercommitAllowed (pkg/apis/core/helper): a native resource (no domain, or kubernetes.io's) that is not
    hugepages; an extended resource (nvidia.com/gpu) is not, and is counted in whole units (IsIntegerResourceName)."""
    return ('/' not in name or 'kubernetes.io/' in name) and not name.startswith('hugepages-')


def _resource_requirement_errors(resources: dict, path: str) -> list[FieldError]:
    """ValidateResourceRequirements (pkg/apis/core/validation/validation.go), its quantity rules: no amount below 0
    (ValidateNonnegativeQuantity), an extended resource's a whole number, and each request within its limit; for a
    resource that cannot be overcommitted, equal to it, and a request without a limit is refused. The request errors
    are at `requests` itself, quoting the quantity's and the limit's String()."""
    limits = {k: v for k, v in (resources.get('limits') or {}).items() if isinstance(v, str)}
    requests = {k: v for k, v in (resources.get('requests') or {}).items() if isinstance(v, str)}
    errors = []
    for kind, amounts in (('limits', limits), ('requests', requests)):
        for name, quantity in amounts.items():
            amount = coreschema.quantity_amount(quantity)
            if amount < 0:
                errors.append(FieldError('FieldValueInvalid', f'{path}.{kind}[{name}]', 'must be greater than or equal to 0', quantity))
            elif not overcommit_allowed(name) and not name.startswith('hugepages-') and amount != amount.to_integral_value():
                errors.append(FieldError('FieldValueInvalid', f'{path}.{kind}[{name}]', 'must be an integer', quantity))
    for name, quantity in requests.items():
        if name not in limits:
            if not overcommit_allowed(name):
                errors.append(FieldError('FieldValueRequired', f'{path}.limits', 'Limit must be set for non overcommitable resources'))
            continue
        request, limit = coreschema.quantity_amount(quantity), coreschema.quantity_amount(limits[name])
        if request != limit and not overcommit_allowed(name):
            errors.append(FieldError('FieldValueInvalid', f'{path}.requests', f'must be equal to {name} limit of {limits[name]}', quantity))
        elif request > limit:
            errors.append(FieldError('FieldValueInvalid', f'{path}.requests', f'must be less than or equal to {name} limit of {limits[name]}',
                                     quantity))
    return errors


# legacyValidateEvent (pkg/apis/core/validation/events.go), all a core/v1 Event is held to on create and update: the
# limits of an Event with an eventTime (kopf's have one), counted as Go's len does, in bytes of UTF-8; the paths are the
# internal type's (core/v1's reportingComponent is reportingController there).
EVENT_LIMITS = (('reportingInstance', 'reportingInstance', 128), ('action', 'action', 128), ('reason', 'reason', 128),
                ('message', 'message', 1024))


def _event_errors(event: dict) -> list[FieldError]:
    """legacyValidateEvent: without an eventTime, only the involved object's namespace, which must be the Event's (or
    unset, in default); with one, a reporting controller (a qualified name), instance, action and reason, each within
    its limit, and a message of at most 1024 bytes."""
    namespace = (event.get('metadata') or {}).get('namespace') or ''
    involved = (event.get('involvedObject') or {}).get('namespace') or ''
    mismatch = FieldError('FieldValueInvalid', 'involvedObject.namespace', 'does not match event.namespace', involved)
    if not event.get('eventTime'):
        return [mismatch] if (namespace not in ('', 'default') if not involved else namespace != involved) else []
    errors = [mismatch] if not involved and namespace not in ('default', 'kube-system') else []
    controller = event.get('reportingComponent') or ''
    if not controller:  # the server adds IsQualifiedName's complaints of the empty name after this one
        errors.append(FieldError('FieldValueRequired', 'reportingController'))
    elif (problem := qualified_name_problem(controller)) is not None:
        errors.append(FieldError('FieldValueInvalid', 'reportingController', problem, controller))
    for key, path, limit in EVENT_LIMITS:
        value = event.get(key) or ''
        if not value and key != 'message':
            errors.append(FieldError('FieldValueRequired', path))
        if len(value.encode()) > limit:
            errors.append(FieldError('FieldValueInvalid', path, f'can have at most {limit} characters', ''))
    return errors


# ValidatePersistentVolumeClaimSpec (pkg/apis/core/validation/validation.go): supportedAccessModes, listed sorted.
ACCESS_MODES = ('ReadOnlyMany', 'ReadWriteMany', 'ReadWriteOnce', 'ReadWriteOncePod')


def _claim_spec_errors(spec: dict) -> list[FieldError]:
    """ValidatePersistentVolumeClaimSpec, on create and on every update: an access mode at least, each supported, and
    ReadWriteOncePod alone; a storage request, above zero (ValidatePositiveQuantityValue: Invalid, the quantity's
    String(), "must be greater than zero"), at the path fldPath.Child("resources").Key("storage") builds."""
    errors = []
    modes = spec.get('accessModes') or []
    if not modes:
        errors.append(FieldError('FieldValueRequired', 'spec.accessModes', 'at least 1 access mode is required'))
    supported = 'supported values: ' + ', '.join(f'"{m}"' for m in ACCESS_MODES)
    errors += [FieldError('FieldValueNotSupported', 'spec.accessModes', supported, m) for m in modes if m not in ACCESS_MODES]
    if 'ReadWriteOncePod' in modes and any(m in ACCESS_MODES and m != 'ReadWriteOncePod' for m in modes):
        errors.append(FieldError('FieldValueForbidden', 'spec.accessModes', 'may not use ReadWriteOncePod with other access modes'))
    storage = ((spec.get('resources') or {}).get('requests') or {}).get('storage')
    if storage is None:
        errors.append(FieldError('FieldValueRequired', 'spec.resources[storage]'))
    elif coreschema.quantity_amount(storage) <= 0:
        errors.append(FieldError('FieldValueInvalid', 'spec.resources[storage]', 'must be greater than zero', storage))
    return errors


# validatePullPolicy (pkg/apis/core/validation/validation.go): supportedPullPolicies, listed sorted as
# field.NotSupported(..., sets.List(...)) lists them; an empty policy is defaulted first (SetDefaults_Container).
PULL_POLICIES = ('Always', 'IfNotPresent', 'Never')
PORT_NAME = re.compile(r'[-a-z0-9]+')


def port_name_problems(name: str) -> list[str]:
    """IsValidPortName (k8s.io/apimachinery/pkg/util/validation/validation.go), its messages in its order."""
    problems = []
    if len(name) > 15:
        problems.append('must be no more than 15 characters')
    if not PORT_NAME.fullmatch(name):
        problems.append('must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)')
    if not re.search('[a-z]', name):
        problems.append('must contain at least one letter (a-z)')
    if '--' in name:
        problems.append('must not contain consecutive hyphens')
    if name.startswith('-') or name.endswith('-'):
        problems.append('must not begin or end with a hyphen')
    return problems


def _container_field_errors(container: dict, path: str, init: bool) -> list[FieldError]:
    """validateContainerCommon's validatePullPolicy and validateContainerPorts (port names: IsValidPortName,
    then "Duplicate value"), and validateContainers' refusal of a regular container's restartPolicy:
    field.Forbidden(path.Child("restartPolicy"), "may not be set for non-init containers"). That last one
    kuberl leaves to the server: since v1.34 a server with the ContainerRestartRules gate (alpha, off by
    default) accepts it in a pod, so only the cluster can say."""
    errors = []
    policy = container.get('imagePullPolicy')
    if policy and policy not in PULL_POLICIES:
        errors.append(FieldError('FieldValueNotSupported', f'{path}.imagePullPolicy',
                                 'supported values: ' + ', '.join(f'"{p}"' for p in PULL_POLICIES), policy))
    names = set()
    for index, port in enumerate(container.get('ports') or []):
        name = port.get('name')
        if not name:
            continue
        where = f'{path}.ports[{index}].name'
        problems = port_name_problems(name)
        errors += [FieldError('FieldValueInvalid', where, problem, name) for problem in problems]
        if not problems and name in names:
            errors.append(FieldError('FieldValueDuplicate', where, value=name))
        names.add(name)
    if not init and container.get('restartPolicy') is not None:
        errors.append(FieldError('FieldValueForbidden', f'{path}.restartPolicy', 'may not be set for non-init containers'))
    return errors


# Pod spec fields an update may change (everything else is refused, as by ValidatePodUpdate).
_POD_MUTABLE = ('spec.containers[*].image, spec.initContainers[*].image, spec.activeDeadlineSeconds, '
                'spec.tolerations (only additions to existing tolerations), spec.terminationGracePeriodSeconds '
                '(allow it to be set to 1 if it was previously negative)')


# ValidateNetworkPolicySpec (pkg/apis/networking/validation/validation.go), on create and, as
# ValidateNetworkPolicyUpdate, on every update and patch (validate_builtin runs on both): its selectors, each rule's
# ports and peers, the policyTypes.
PROTOCOLS = ('TCP', 'UDP', 'SCTP')
PORT_RANGE = 'must be between 1 and 65535, inclusive'  # IsValidPortNum


def networkpolicy_spec_errors(spec: dict) -> list[FieldError]:
    errors = label_selector_errors(spec.get('podSelector') or {}, 'spec.podSelector')
    for direction, peers in (('ingress', 'from'), ('egress', 'to')):
        for i, rule in enumerate(spec.get(direction) or []):
            for j, port in enumerate(rule.get('ports') or []):
                errors += _networkpolicy_port_errors(port, f'spec.{direction}[{i}].ports[{j}]')
            for j, peer in enumerate(rule.get(peers) or []):
                errors += _networkpolicy_peer_errors(peer, f'spec.{direction}[{i}].{peers}[{j}]')
    types = spec.get('policyTypes') or []
    if len(types) > 2:
        return errors + [FieldError('FieldValueInvalid', 'spec.policyTypes', 'may not specify more than two policyTypes', types)]
    return errors + [FieldError('FieldValueNotSupported', f'spec.policyTypes[{i}]', 'supported values: "Ingress", "Egress"', kind)
                     for i, kind in enumerate(types) if kind not in ('Ingress', 'Egress')]


def _networkpolicy_port_errors(port: dict, path: str) -> list[FieldError]:
    """ValidateNetworkPolicyPort: a protocol of three, a port number in range or a port name, and an endPort only
    after a numeric port, at or above it."""
    errors = []
    if port.get('protocol') is not None and port['protocol'] not in PROTOCOLS:
        errors.append(FieldError('FieldValueNotSupported', f'{path}.protocol', 'supported values: "TCP", "UDP", "SCTP"', port['protocol']))
    number, end = port.get('port'), port.get('endPort')
    if isinstance(number, int):
        if not 1 <= number <= 65535:
            errors.append(FieldError('FieldValueInvalid', f'{path}.port', PORT_RANGE, number))
        if end is not None:
            if end < number:
                errors.append(FieldError('FieldValueInvalid', f'{path}.endPort', 'must be greater than or equal to `port`', number))
            if not 1 <= end <= 65535:
                errors.append(FieldError('FieldValueInvalid', f'{path}.endPort', PORT_RANGE, end))
    elif number is not None:
        if end is not None:
            errors.append(FieldError('FieldValueInvalid', f'{path}.endPort', 'may not be specified when `port` is non-numeric', end))
        errors += [FieldError('FieldValueInvalid', f'{path}.port', problem, number) for problem in port_name_problems(number)]
    elif end is not None:
        errors.append(FieldError('FieldValueInvalid', f'{path}.endPort', 'may not be specified when `port` is not specified', end))
    return errors


def _networkpolicy_peer_errors(peer: dict, path: str) -> list[FieldError]:
    """ValidateNetworkPolicyPeer: at least one of podSelector, namespaceSelector and ipBlock, and ipBlock alone."""
    errors = []
    for key in ('podSelector', 'namespaceSelector'):
        if peer.get(key) is not None:
            errors += label_selector_errors(peer[key], f'{path}.{key}')
    block = peer.get('ipBlock')
    if block is not None:
        errors += _ip_block_errors(block, f'{path}.ipBlock')
    present = sum(peer.get(key) is not None for key in ('podSelector', 'namespaceSelector', 'ipBlock'))
    if not present:
        errors.append(FieldError('FieldValueRequired', path, 'must specify a peer'))
    elif present > 1 and block is not None:
        errors.append(FieldError('FieldValueForbidden', path, 'may not specify both ipBlock and another peer'))
    return errors


def _ip_block_errors(block: dict, path: str) -> list[FieldError]:
    """ValidateIPBlock: a cidr, and each except a strict subset of it."""
    if not block.get('cidr'):
        return [FieldError('FieldValueRequired', f'{path}.cidr')]
    try:
        cidr = ipaddress.ip_network(block['cidr'], strict=False)
    except ValueError:
        return [FieldError('FieldValueInvalid', f'{path}.cidr', 'must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)', block['cidr'])]
    errors = []
    for i, text in enumerate(block.get('except') or []):
        try:
            inner = ipaddress.ip_network(text, strict=False)
        except ValueError:
            errors.append(FieldError('FieldValueInvalid', f'{path}.except[{i}]', 'must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)', text))
            continue
        if inner.version != cidr.version or inner.network_address not in cidr or cidr.prefixlen >= inner.prefixlen:
            errors.append(FieldError('FieldValueInvalid', f'{path}.except[{i}]', 'must be a strict subset of `cidr`', text))
    return errors


def label_selector_errors(selector: dict, path: str) -> list[FieldError]:
    """ValidateLabelSelector (k8s.io/apimachinery/pkg/apis/meta/v1/validation): matchLabels as labels are held to,
    and each matchExpression's key, operator and values (none for Exists and DoesNotExist, some for In and NotIn)."""
    errors = [FieldError(e.reason, f'{path}.matchLabels', e.detail, e.value)
              for e in validate_labels({'labels': selector.get('matchLabels') or {}})]
    for i, expression in enumerate(selector.get('matchExpressions') or []):
        where, operator, values = f'{path}.matchExpressions[{i}]', expression.get('operator'), expression.get('values') or []
        if operator in ('In', 'NotIn') and not values:
            errors.append(FieldError('FieldValueRequired', f'{where}.values', "must be specified when `operator` is 'In' or 'NotIn'"))
        elif operator in ('Exists', 'DoesNotExist') and values:
            errors.append(FieldError('FieldValueForbidden', f'{where}.values', "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
        elif operator not in ('In', 'NotIn', 'Exists', 'DoesNotExist'):
            errors.append(FieldError('FieldValueInvalid', f'{where}.operator', 'not a valid selector operator', operator))
        if (problem := qualified_name_problem(str(expression.get('key') or ''))) is not None:
            errors.append(FieldError('FieldValueInvalid', f'{where}.key', problem, expression.get('key')))
    return errors


def _strip_pod_mutables(spec: dict) -> dict:
    spec = dict(spec)
    for key in ('containers', 'initContainers'):
        spec[key] = [{k: v for k, v in c.items() if k != 'image'} for c in spec.get(key) or []]
    for key in ('activeDeadlineSeconds', 'tolerations', 'terminationGracePeriodSeconds', 'schedulingGates'):
        spec.pop(key, None)
    return spec


def validate_builtin_update(rtype: ResourceType, new: dict, old: dict) -> list[FieldError]:
    if rtype.plural == 'pods':
        old_spec, new_spec = old.get('spec') or {}, new.get('spec') or {}
        if _strip_pod_mutables(old_spec) != _strip_pod_mutables(new_spec):
            return [FieldError('FieldValueForbidden', 'spec', f'pod updates may not change fields other than {_POD_MUTABLE}')]
        added = [t for t in old_spec.get('tolerations') or [] if t not in (new_spec.get('tolerations') or [])]
        if added:
            return [FieldError('FieldValueForbidden', 'spec.tolerations', 'existing toleration can not be modified except its tolerationSeconds')]
    if rtype.plural in ('configmaps', 'secrets') and old.get('immutable'):
        errors = []
        if not new.get('immutable'):
            errors.append(FieldError('FieldValueForbidden', 'immutable', 'field is immutable when `immutable` is set'))
        for key in ('data', 'binaryData', 'stringData'):
            if new.get(key) != old.get(key):
                errors.append(FieldError('FieldValueForbidden', key, 'field is immutable when `immutable` is set'))
        return errors
    if rtype.plural == 'services':
        old_ip, new_ip = (old.get('spec') or {}).get('clusterIP'), (new.get('spec') or {}).get('clusterIP')
        if new_ip not in (None, '', old_ip):
            return [FieldError('FieldValueInvalid', 'spec.clusterIP', 'field is immutable', new_ip)]
    if rtype.plural == 'persistentvolumeclaims':
        return _claim_update_errors(new, old)
    return []


def _claim_update_errors(new: dict, old: dict) -> list[FieldError]:
    """ValidatePersistentVolumeClaimUpdate (pkg/apis/core/validation/validation.go): the spec is frozen but for
    volumeName while unset, volumeAttributesClassName, and the storage request of a Bound claim; a smaller request is
    refused down to status.capacity (RecoverVolumeExpansionFailure, beta and on since v1.32, lets a failed expansion
    be taken back above it). The server's Forbidden ends with a cmp.Diff of the two specs, left out here."""
    old_spec, new_spec = old.get('spec') or {}, new.get('spec') or {}
    bound = (new.get('status') or {}).get('phase') == 'Bound'

    def frozen(spec: dict, own: bool) -> dict:
        spec = {k: v for k, v in spec.items() if k != 'volumeAttributesClassName'}
        if not old_spec.get('volumeName'):
            spec.pop('volumeName', None)
        requests = dict((spec.get('resources') or {}).get('requests') or {})
        if bound and own and 'storage' in requests:
            requests['storage'] = ((old_spec.get('resources') or {}).get('requests') or {}).get('storage')
        amounts = {k: coreschema.quantity_amount(v) if isinstance(v, str) else v for k, v in requests.items()}
        return {**spec, 'resources': {**(spec.get('resources') or {}), 'requests': amounts}}  # Semantic.DeepEqual: Cmp

    errors = []
    if frozen(new_spec, True) != frozen(old_spec, False):
        errors.append(FieldError('FieldValueForbidden', 'spec', 'spec is immutable after creation except resources.requests '
                                 'and volumeAttributesClassName for bound claims'))

    def storage(obj: dict, *keys: str) -> decimal.Decimal:
        for key in keys:
            obj = obj.get(key) or {}
        return coreschema.quantity_amount(obj) if isinstance(obj, str) else decimal.Decimal(0)

    new_size = storage(new_spec, 'resources', 'requests', 'storage')
    if new_size < storage(old_spec, 'resources', 'requests', 'storage') and new_size <= storage(old, 'status', 'capacity', 'storage'):
        errors.append(FieldError('FieldValueForbidden', 'spec.resources.requests.storage', 'field can not be less than status.capacity'))
    return errors
