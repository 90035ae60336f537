"""The stand-in's object store: every write rule of the API server, synchronous and thread-safe.

The HTTP layer (apiserver.py) only decodes requests and encodes answers; tests and the
local node's hooks may call the store directly from another thread.
"""
import collections
import contextlib
import datetime
import json
import random
import string
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from tests.support import coreschema, patching, resources
from tests.support.crdschema import FieldError
from tests.support.resources import ResourceType
from tests.support.selectors import (
    FieldRequirement,
    LabelRequirement,
    fields_match,
    labels_match,
)

SYSTEM_PRIORITY_CLASSES = {'system-node-critical': {'value': 2000001000}, 'system-cluster-critical': {'value': 2000000000}}
HISTORY = 4000  # watch events kept per resource type; an older resourceVersion gets 410 Gone
DEFAULT_NAMESPACES = ('default', 'kube-system', 'kube-public', 'kube-node-lease')
CRDS = ('apiextensions.k8s.io', 'customresourcedefinitions')
# Put on a CRD by its first delete (staging/src/k8s.io/apiextensions-apiserver/pkg/registry/customresourcedefinition/
# etcd.go, REST.Delete), taken off by the CRD finalizer once no instance is left (pkg/controller/finalizer/crd_finalizer.go).
CRD_CLEANUP_FINALIZER = 'customresourcecleanup.apiextensions.k8s.io'
# A removed CRD's storage is torn down a second after it goes (pkg/apiserver/customresource_handler.go, tearDown:
# time.Sleep(time.Second) for in-flight requests, which a watch is not, being long-running), ending its open watches.
CRD_TEARDOWN_SECONDS = 1.0


def clone(obj: object) -> object:
    """A deep copy of a JSON document (several times faster than copy.deepcopy)."""
    return json.loads(json.dumps(obj))


class ApiError(Exception):
    """An answer the API server gives as a Status object."""

    def __init__(self, code: int, reason: str, message: str, details: dict | None = None):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details or {}

    def status(self) -> dict:
        status = {'kind': 'Status', 'apiVersion': 'v1', 'metadata': {}, 'status': 'Failure',
                  'message': self.message, 'reason': self.reason, 'code': self.code}
        if not self.reason:  # metav1.Status omits an empty reason (a webhook's denial may set none)
            del status['reason']
        if self.details:  # metav1.StatusDetails: every field omitempty (a core group's "" is left out)
            status['details'] = {key: value for key, value in self.details.items() if value not in ('', None)}
        return status


class Compacted(Exception):
    """A revision older than the events kept of its type: etcd compacted it."""


def not_found(rtype: ResourceType, name: str) -> ApiError:
    return ApiError(404, 'NotFound', f'{rtype.qualified} "{name}" not found',
                    {'name': name, 'group': rtype.group, 'kind': rtype.plural})


def conflict(rtype: ResourceType, name: str, why: str) -> ApiError:
    return ApiError(409, 'Conflict', f'Operation cannot be fulfilled on {rtype.qualified} "{name}": {why}',
                    {'name': name, 'group': rtype.group, 'kind': rtype.plural})


# A guarded write (an update or patch whose object carries metadata.resourceVersion) on a stale version: the registry's
# Update (staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go, inside Storage.GuaranteedUpdate) answers
# apierrors.NewConflict(qualifiedResource, name, fmt.Errorf(OptimisticLockErrorMsg)); NewConflict (staging/src/k8s.io/
# apimachinery/pkg/api/errors/errors.go) makes it 409, reason Conflict, details {group, kind: the resource, name}, and
# "Operation cannot be fulfilled on %s %q: %v" with the request's resource, without its subresource (RequestInfo.Resource).
OPTIMISTIC_LOCK = 'the object has been modified; please apply your changes to the latest version and try again'


def invalid(rtype: ResourceType, name: str, errors: list[FieldError]) -> ApiError:
    return invalid_kind(rtype.kind_qualified, rtype.group, rtype.kind, name, errors)


def invalid_kind(kind_qualified: str, group: str, kind: str, name: str, errors: list[FieldError]) -> ApiError:
    """apierrors.NewInvalid: 422 Invalid, the field errors aggregated as Go prints them."""
    listed = '; '.join(str(e) for e in errors) if len(errors) == 1 else '[' + ', '.join(str(e) for e in errors) + ']'
    return ApiError(422, 'Invalid', f'{kind_qualified} "{name}" is invalid: {listed}',
                    {'name': name, 'group': group, 'kind': kind, 'causes': [e.cause() for e in errors]})


def bad_request(message: str) -> ApiError:
    return ApiError(400, 'BadRequest', message)


# The stand-in's clock against this machine's: a test sets it to play an API server whose clock is
# off (its timestamps and its answers' Date header both follow it).
CLOCK_OFFSET = datetime.timedelta(0)


def _core_meta(rtype: ResourceType) -> bool:
    """Whether the kind's ObjectMeta passes core's ValidateObjectMeta (pkg/apis/core/validation), as every built-in
    group's does, or only apimachinery's: custom resources, and the CRDs apiextensions-apiserver serves."""
    return not rtype.custom and rtype.group != 'apiextensions.k8s.io'


def pod_qos(spec: dict) -> str:
    """ComputePodQOS (pkg/apis/core/helper/qos/qos.go): cpu and memory above zero, summed over the containers and init
    containers; none at all is BestEffort; a limit of both in every container, with requests equal to limits, is
    Guaranteed; anything else Burstable."""
    totals: dict[str, dict[str, object]] = {'requests': {}, 'limits': {}}
    guaranteed = True
    for container in spec.get('containers', []) + spec.get('initContainers', []):
        resources = container.get('resources') or {}
        for kind in ('requests', 'limits'):
            found = {name: coreschema.quantity_amount(q) for name, q in (resources.get(kind) or {}).items()
                     if name in ('cpu', 'memory') and isinstance(q, str) and coreschema.quantity_amount(q) > 0}
            for name, amount in found.items():
                totals[kind][name] = totals[kind].get(name, 0) + amount
            if kind == 'limits' and set(found) != {'cpu', 'memory'}:
                guaranteed = False
    requests, limits = totals['requests'], totals['limits']
    if not requests and not limits:
        return 'BestEffort'
    if guaranteed and all(limits.get(name) == amount for name, amount in requests.items()) and len(requests) == len(limits):
        return 'Guaranteed'
    return 'Burstable'


def now() -> datetime.datetime:
    return (datetime.datetime.now(datetime.UTC) + CLOCK_OFFSET).replace(microsecond=0)


def timestamp(moment: datetime.datetime | None = None) -> str:
    return (moment or now()).strftime('%Y-%m-%dT%H:%M:%SZ')


def parse_time(text: str) -> datetime.datetime:
    return datetime.datetime.strptime(text, '%Y-%m-%dT%H:%M:%SZ').replace(tzinfo=datetime.UTC)


@dataclass(frozen=True)
class WatchEvent:
    rv: int
    type: str
    obj: dict
    old: dict | None


@dataclass
class Watcher:
    rtype_key: tuple[str, str]
    deliver: Callable[[WatchEvent], None]
    close: Callable[[], None] | None = None  # ends the stream: its resource's storage was destroyed (CRD removed)


@dataclass
class Hooks:
    """Test hooks: label selectors of pods the scheduler, kubelet or eviction must treat specially;
    `admission`: validating admission on create (tests.support.admission.Refuse), each may raise ApiError."""
    unschedulable: list[list[LabelRequirement]] = field(default_factory=list)
    image_pull_failure: list[list[LabelRequirement]] = field(default_factory=list)
    admission: list[Callable[[ResourceType, dict], None]] = field(default_factory=list)
    # The next N guarded writes (update or patch carrying metadata.resourceVersion, /status included) of the object
    # (plural, namespace, name) are refused as if another writer's write had landed between the writer's read and its
    # write: the real server's 409 Conflict (OPTIMISTIC_LOCK), nothing stored. Unguarded writes pass and count nothing.
    conflicts: dict[tuple[str, str, str], int] = field(default_factory=dict)

    @staticmethod
    def matches(selectors: list[list[LabelRequirement]], pod: dict) -> bool:
        labels = pod.get('metadata', {}).get('labels') or {}
        return any(labels_match(selector, labels) for selector in selectors)


class Store:
    """Objects by (group, plural) → (namespace, name); one global resourceVersion counter."""

    def __init__(self, default_node: str | None = 'local-node', kubelet_delay: float = 0.05,
                 unattended_pods_use_grace: bool = False):
        self.lock = threading.RLock()
        self.types: dict[tuple[str, str, str], ResourceType] = {}
        self.objects: dict[tuple[str, str], dict[tuple[str, str], dict]] = collections.defaultdict(dict)
        self.by_uid: dict[str, tuple[tuple[str, str], tuple[str, str]]] = {}
        self.history: dict[tuple[str, str], collections.deque[WatchEvent]] = collections.defaultdict(
            lambda: collections.deque(maxlen=HISTORY))
        self.history_floor: dict[tuple[str, str], int] = collections.defaultdict(int)
        self.watchers: list[Watcher] = []
        self.revision = 0
        self.default_node = default_node
        self.kubelet_delay = kubelet_delay
        # Without a registered kubelet, a deleted pod goes after kubelet_delay (its imaginary containers stop at
        # once), or, with this set, when its grace period ends (containers that ignore SIGTERM).
        self.unattended_pods_use_grace = unattended_pods_use_grace
        self.hooks = Hooks()
        self._gc_pending = False
        self._gc_held = False
        self.schedule: Callable[[float, Callable[[], None]], None] = lambda delay, fn: threading.Timer(delay, fn).start()
        # The CRD finalizer waits for a deleted CRD's instances to go by polling every 5 s for up to a minute, then
        # starts again (crd_finalizer.go, deleteInstances: wait.PollImmediate(5*time.Second, 1*time.Minute, ...));
        # a test may shorten both.
        self.crd_cleanup_poll = 5.0
        self.crd_cleanup_timeout = 60.0
        for rtype in resources.BUILTINS:
            self.types[(rtype.group, rtype.version, rtype.plural)] = rtype
        for namespace in DEFAULT_NAMESPACES:
            self.create(self.type_of('', 'v1', 'namespaces'), None, {'metadata': {'name': namespace}})

    # ------------------------------------------------------------ types

    def type_of(self, group: str, version: str, plural: str) -> ResourceType:
        rtype = self.types.get((group, version, plural))
        if rtype is None:
            raise ApiError(404, 'NotFound', 'the server could not find the requested resource')
        return rtype

    def served_types(self) -> list[ResourceType]:
        with self.lock:
            return list(self.types.values())

    def _register_crd(self, crd: dict) -> None:
        for rtype in resources.custom_types(crd):
            self.types[(rtype.group, rtype.version, rtype.plural)] = rtype

    def _unregister_crd(self, crd: dict) -> None:
        group, plural = crd['spec']['group'], crd['spec']['names']['plural']
        for key in [k for k in self.types if k[0] == group and k[2] == plural]:
            del self.types[key]
        # Its instances stay stored: only the CRD finalizer deletes them (crd_finalizer.go, deleteInstances), and
        # tearDown destroys the storage's cache, not its data; left by a cleanup finalizer taken off by hand, they are
        # served again, as they were, once a CRD of that group and plural is created again.
        # Its storage destroyed (customresource_handler.go: removeDeadStorage, then tearDown's DestroyFunc stops the
        # watch cache, which closes every watch of it): the streams open now end; a new request gets 404.
        watchers = [w for w in self.watchers if w.rtype_key == (group, plural)]
        self.schedule(CRD_TEARDOWN_SECONDS, lambda: self._end_watches(watchers))

    def _end_watches(self, watchers: list[Watcher]) -> None:
        with self.lock:
            for watcher in watchers:
                if watcher in self.watchers:
                    self.watchers.remove(watcher)
                    if watcher.close is not None:
                        watcher.close()

    # ------------------------------------------------------------ reads

    def get(self, rtype: ResourceType, namespace: str | None, name: str) -> dict:
        with self.lock:
            obj = self.objects[rtype.key].get((namespace or '', name))
            if obj is None:
                raise not_found(rtype, name)
            return self._versioned(rtype, obj)

    def list_objects(self, rtype: ResourceType, namespace: str | None, labels: list[LabelRequirement],
             fields: list[FieldRequirement], at: int | None = None) -> tuple[list[dict], str]:
        """The objects as they are, or as they were at revision `at` (a continue token's: etcd serves every page of
        a list from the first page's revision); raises Compacted when the events since are no longer kept."""
        with self.lock:
            objects = self.objects[rtype.key] if at is None else self._objects_at(rtype.key, at)
            items = [self._versioned(rtype, obj) for (ns, _), obj in sorted(objects.items())
                     if (not namespace or ns == namespace)
                     and labels_match(labels, obj['metadata'].get('labels')) and fields_match(fields, obj)]
            return items, str(self.revision if at is None else at)

    def _objects_at(self, key: tuple[str, str], revision: int) -> dict:
        """One type's objects at `revision`: today's, with every event after it undone (an ADDED removed, a MODIFIED
        or DELETED object back to what it was), while those events are kept, as a watch's are."""
        if revision < self.history_floor[key]:
            raise Compacted(revision)
        objects = dict(self.objects[key])
        for event in reversed(self.history[key]):
            if event.rv <= revision:
                break
            metadata = event.obj['metadata']
            if event.type == 'ADDED':
                objects.pop((metadata.get('namespace', ''), metadata['name']), None)
            else:
                objects[(metadata.get('namespace', ''), metadata['name'])] = event.old
        return objects

    def _versioned(self, rtype: ResourceType, obj: dict) -> dict:
        """The object as served at this version (all versions of a type share one stored shape)."""
        return {**self._decoded(rtype, obj), 'apiVersion': rtype.api_version}

    @staticmethod
    def _decoded(rtype: ResourceType, stored: dict) -> dict:
        """A stored object as the API server reads it back: a custom resource takes its CRD's defaults as they are
        now, which are not written back (KEP-575, "Defaulting for Custom Resources": defaults apply when decoding,
        reading from etcd included). A CRD that adds a defaulted field shows it on every object stored before, and
        an update compares against, and a patch applies to, the object so read."""
        if rtype.schema is None:
            return stored
        decoded = clone(stored)
        rtype.schema.default_stored(decoded)
        return decoded

    def find(self, group: str, plural: str, namespace: str, name: str) -> dict | None:
        with self.lock:
            obj = self.objects[(group, plural)].get((namespace, name))
            return clone(obj) if obj else None

    def objects_of(self, group: str, plural: str) -> list[dict]:
        with self.lock:
            return [clone(obj) for obj in self.objects[(group, plural)].values()]

    # ------------------------------------------------------------ watches

    def subscribe(self, rtype: ResourceType, since: str | None, deliver: Callable[[WatchEvent], None],
                  snapshot: Callable[[list[dict], int], None], close: Callable[[], None] | None = None) -> Watcher:
        """Register a watcher; replay from `since` (or send the current state as ADDED) under the lock."""
        with self.lock:
            if since in (None, '', '0'):
                snapshot([self._versioned(rtype, obj) for _, obj in sorted(self.objects[rtype.key].items())], self.revision)
            else:
                try:
                    start = int(since)
                except ValueError:
                    raise bad_request(f'invalid resource version: {since!r}') from None
                if start < self.history_floor[rtype.key]:
                    raise ApiError(410, 'Expired', f'too old resource version: {start} ({self.history_floor[rtype.key]})')
                for event in self.history[rtype.key]:
                    if event.rv > start:
                        deliver(event)
            watcher = Watcher(rtype.key, deliver, close)
            self.watchers.append(watcher)
            return watcher

    def unsubscribe(self, watcher: Watcher) -> None:
        with self.lock:
            if watcher in self.watchers:
                self.watchers.remove(watcher)

    def _emit(self, key: tuple[str, str], kind: str, obj: dict, old: dict | None) -> None:
        event = WatchEvent(int(obj['metadata']['resourceVersion']), kind, obj, old)
        history = self.history[key]
        if len(history) == history.maxlen:
            self.history_floor[key] = history[0].rv
        history.append(event)
        for watcher in self.watchers:
            if watcher.rtype_key == key:
                watcher.deliver(event)

    def _bump(self) -> str:
        self.revision += 1
        return str(self.revision)

    # ------------------------------------------------------------ create

    def create(self, rtype: ResourceType, namespace: str | None, body: dict, *, dry_run: bool = False,
               field_validation: str = 'Warn') -> tuple[dict, list[str]]:
        with self.lock:
            if rtype.custom:
                self._check_crd_not_terminating(rtype)
            if not isinstance(body, dict):
                raise bad_request('the body of the request was in an unknown format')
            obj = clone(body)
            metadata = obj.setdefault('metadata', {}) or {}
            obj['metadata'] = metadata
            self._check_kind(rtype, obj)
            namespace = self._namespace_for(rtype, namespace, metadata)
            if not metadata.get('name') and metadata.get('generateName'):
                metadata['name'] = metadata['generateName'] + ''.join(random.choices(string.ascii_lowercase + string.digits, k=5))
            name = metadata.get('name')
            if not name:
                raise invalid(rtype, '', [FieldError('FieldValueRequired', 'metadata.name', 'name or generateName is required')])
            if metadata.get('resourceVersion'):
                raise bad_request('resourceVersion should not be set on objects to be created')
            if rtype.namespaced:
                self._check_namespace_open(namespace)
            existing = self.objects[rtype.key].get((namespace, name))
            if existing is not None:
                raise ApiError(409, 'AlreadyExists', f'{rtype.qualified} "{name}" already exists',
                               {'name': name, 'group': rtype.group, 'kind': rtype.plural})
            warnings = self._decode(rtype, obj, field_validation)
            if rtype.plural == 'pods' and not rtype.group:
                self._admit_priority(rtype, name, obj)
            if rtype.has_status and rtype.custom:
                obj.pop('status', None)
            if rtype.namespaced:  # the request's namespace, set before validation (EnsureObjectNamespaceMatchesRequestNamespace)
                metadata['namespace'] = namespace
            errors = resources.validate_name(rtype, name) + resources.validate_metadata(metadata, _core_meta(rtype))
            errors += self._validate(rtype, obj, None)
            if errors:
                raise invalid(rtype, name, errors)
            for admit in self.hooks.admission:  # validating admission runs after the object's own validation
                admit(rtype, obj)
            for key in ('deletionTimestamp', 'deletionGracePeriodSeconds'):
                metadata.pop(key, None)
            metadata.update(name=name, uid=str(uuid.uuid4()), creationTimestamp=timestamp(), generation=1)
            if rtype.namespaced:
                metadata['namespace'] = namespace
            else:
                metadata.pop('namespace', None)
            obj['apiVersion'], obj['kind'] = rtype.api_version, rtype.kind
            self._on_create(rtype, obj)
            if rtype.custom:
                warnings += resources.custom_finalizer_warnings(metadata.get('finalizers') or [])
            if dry_run:
                return obj, warnings
            metadata['resourceVersion'] = self._bump()
            self._store(rtype.key, obj)
            self._emit(rtype.key, 'ADDED', obj, None)
            self._after_create(rtype, obj)
            return clone(obj), warnings

    def _check_crd_not_terminating(self, rtype: ResourceType) -> None:
        """The custom resource handler refuses a create while its CRD's Terminating condition is True, before reading
        the body (pkg/apiserver/customresource_handler.go, serveResource: NewMethodNotSupported, its message replaced);
        a server-side apply that would create is refused alike (test/integration/finalization_test.go,
        TestApplyCRDuringCRDFinalization)."""
        crd = self.objects[CRDS].get(('', rtype.qualified))
        if crd is not None and condition_true(crd, 'Terminating'):
            raise ApiError(405, 'MethodNotAllowed', 'create not allowed while custom resource definition is terminating',
                           {'group': rtype.group, 'kind': rtype.plural})

    def _check_kind(self, rtype: ResourceType, obj: dict) -> None:
        kind, api_version = obj.get('kind'), obj.get('apiVersion')
        if rtype.custom and (not kind or not api_version):
            raise bad_request("Object 'Kind' is missing in the request body" if not kind
                              else "Object 'apiVersion' is missing in the request body")
        if kind and kind != rtype.kind:
            raise bad_request(f'the kind of the object ({kind}) does not match the resource ({rtype.kind})')
        if api_version and api_version.split('/')[0] != (rtype.group or 'v1') and api_version != rtype.api_version:
            raise bad_request(f'the API version in the data ({api_version}) does not match the expected API version ({rtype.api_version})')

    def _namespace_for(self, rtype: ResourceType, namespace: str | None, metadata: dict) -> str:
        if not rtype.namespaced:
            return ''
        if metadata.get('namespace') and namespace and metadata['namespace'] != namespace:
            raise bad_request('the namespace of the provided object does not match the namespace sent on the request')
        if not namespace:
            raise ApiError(404, 'NotFound', 'the server could not find the requested resource')
        return namespace

    def _check_namespace_open(self, namespace: str) -> None:
        ns = self.objects[('', 'namespaces')].get(('', namespace))
        if ns is None:
            raise ApiError(404, 'NotFound', f'namespaces "{namespace}" not found',
                           {'name': namespace, 'kind': 'namespaces'})
        if ns['metadata'].get('deletionTimestamp'):
            raise ApiError(403, 'Forbidden', f'unable to create new content in namespace {namespace} because it is being terminated')

    def _decode(self, rtype: ResourceType, obj: dict, field_validation: str) -> list[str]:
        """Prune and default like the decoder: unknown fields are an error (Strict), a warning (Warn) or dropped."""
        unknown: list[str] = []
        try:
            if rtype.schema is None:
                definition = coreschema.definition_for(rtype.group, rtype.version, rtype.kind)
                if definition is not None:
                    coreschema.decode(obj, definition, '', unknown)
            else:
                coreschema.decode(obj.get('metadata') or {}, coreschema.object_meta(), 'metadata', unknown)
        except coreschema.TypeMismatch as error:
            said = error if isinstance(error, coreschema.UnmarshalerError) else f'json: {error}'
            raise bad_request(f'{rtype.kind} in version "{rtype.version}" cannot be handled as a {rtype.kind}: {said}') from None
        if rtype.schema is not None:
            unknown += rtype.schema.prepare(obj)
        if unknown and field_validation == 'Strict':
            listed = ', '.join(f'unknown field "{path}"' for path in unknown)
            raise bad_request(f'{rtype.kind} in version "{rtype.version}" cannot be handled as a {rtype.kind}: '
                              f'strict decoding error: {listed}')
        return [f'unknown field "{path}"' for path in unknown] if field_validation == 'Warn' else []

    def _validate(self, rtype: ResourceType, obj: dict, old: dict | None, warnings: list[str] | None = None) -> list[FieldError]:
        errors = []
        if rtype.schema is not None:
            errors += rtype.schema.validate(obj, old, warnings)
        else:
            errors += resources.validate_builtin(rtype, obj, creating=old is None)
        if old is not None:
            errors += resources.validate_builtin_update(rtype, obj, old)
        return errors

    def _admit_priority(self, rtype: ResourceType, name: str, pod: dict) -> None:
        """The Priority admission plugin (on by default; plugin/pkg/admission/priority/admission.go, admitPod), which
        mutates before validation: a pod's priority is its PriorityClass's value (the lowest-valued globalDefault class
        without a name, else 0); a class that does not exist, or a priority or preemptionPolicy in the pod that differs
        from the computed one, is a 403 Forbidden (admission.NewForbidden)."""
        spec = pod.get('spec') if isinstance(pod.get('spec'), dict) else {}
        classes = self.objects[('scheduling.k8s.io', 'priorityclasses')]

        def refuse(cause: str) -> ApiError:
            return ApiError(403, 'Forbidden', f'{rtype.qualified} "{name}" is forbidden: {cause}',
                            {'name': name, 'group': rtype.group, 'kind': rtype.plural})

        class_name = spec.get('priorityClassName') or ''
        if class_name:
            # The API server creates these two at start (SystemPriorityClasses, pkg/apis/scheduling/types.go).
            chosen = classes.get(('', class_name)) or SYSTEM_PRIORITY_CLASSES.get(class_name)
            if chosen is None:
                raise refuse(f'no PriorityClass with name {class_name} was found')
        else:
            defaults = [c for c in classes.values() if c.get('globalDefault')]
            chosen = min(defaults, key=lambda c: c.get('value', 0)) if defaults else None
            if chosen is not None:
                spec['priorityClassName'] = chosen['metadata']['name']
        priority = chosen.get('value', 0) if chosen is not None else 0
        policy = (chosen or {}).get('preemptionPolicy') or 'PreemptLowerPriority'
        if spec.get('priority') is not None and spec['priority'] != priority:
            raise refuse(f'the integer value of priority ({spec["priority"]}) must not be provided in pod spec; priority'
                         f' admission controller computed {priority} from the given PriorityClass name')
        if spec.get('preemptionPolicy') is not None and spec['preemptionPolicy'] != policy:
            raise refuse(f'the string value of PreemptionPolicy ({spec["preemptionPolicy"]}) must not be provided in pod'
                         f' spec; priority admission controller computed {policy} from the given PriorityClass name')
        spec['priority'], spec['preemptionPolicy'] = priority, policy

    def _on_create(self, rtype: ResourceType, obj: dict) -> None:
        """Fields the API server itself fills on create."""
        if rtype.plural == 'pods':
            spec = obj.setdefault('spec', {})
            spec.setdefault('restartPolicy', 'Always')
            spec.setdefault('terminationGracePeriodSeconds', 30)
            spec.setdefault('schedulerName', 'default-scheduler')
            spec.setdefault('serviceAccountName', 'default')
            spec.setdefault('dnsPolicy', 'ClusterFirst')
            for container in spec.get('containers', []) + spec.get('initContainers', []):
                container.setdefault('terminationMessagePath', '/dev/termination-log')
                container.setdefault('terminationMessagePolicy', 'File')
                container.setdefault('imagePullPolicy', 'Always' if container.get('image', '').endswith(':latest') else 'IfNotPresent')
                resources = container.get('resources') or {}
                if resources.get('limits'):  # SetDefaults_Pod (pkg/apis/core/v1/defaults.go): an unset request is its limit
                    container['resources'] = {**resources, 'requests': {**resources['limits'], **(resources.get('requests') or {})}}
            obj['status'] = {'phase': 'Pending', 'qosClass': pod_qos(spec)}
            self._schedule_pod(obj)
        elif rtype.plural == 'services':
            spec = obj.setdefault('spec', {})
            if spec.get('clusterIP') != 'None':
                spec['clusterIP'] = f'10.96.{random.randrange(256)}.{random.randrange(1, 255)}'
            spec.setdefault('type', 'ClusterIP')
            spec['clusterIPs'] = [spec['clusterIP']]
            obj['status'] = {'loadBalancer': {}}
        elif rtype.plural == 'namespaces':
            obj['spec'] = {'finalizers': ['kubernetes']}
            obj['status'] = {'phase': 'Active'}
            obj['metadata'].setdefault('labels', {})['kubernetes.io/metadata.name'] = obj['metadata']['name']
        elif rtype.plural == 'persistentvolumeclaims':
            # The default StorageClass and an immediate-binding provisioner.
            spec = obj.setdefault('spec', {})
            spec.setdefault('storageClassName', 'standard')
            spec.setdefault('volumeMode', 'Filesystem')
            spec['volumeName'] = f'pvc-{obj["metadata"]["uid"]}'
            obj['status'] = {'phase': 'Bound', 'accessModes': spec.get('accessModes', []),
                             'capacity': {'storage': ((spec.get('resources') or {}).get('requests') or {}).get('storage', '0')}}
        elif rtype.plural == 'customresourcedefinitions':
            obj['status'] = {'conditions': [
                {'type': 'NamesAccepted', 'status': 'True', 'reason': 'NoConflicts', 'lastTransitionTime': timestamp()},
                {'type': 'Established', 'status': 'True', 'reason': 'InitialNamesAccepted', 'lastTransitionTime': timestamp()},
            ], 'acceptedNames': obj['spec']['names'], 'storedVersions': [
                v['name'] for v in obj['spec']['versions'] if v.get('storage')]}

    def _after_create(self, rtype: ResourceType, obj: dict) -> None:
        if rtype.plural == 'customresourcedefinitions':
            self._register_crd(obj)
        if obj['metadata'].get('ownerReferences'):
            self._request_gc()

    def _schedule_pod(self, pod: dict) -> None:
        """The scheduler's part: bind to the default node unless a test hook keeps the pod Pending."""
        if pod['spec'].get('nodeName'):
            return
        if self.default_node is None or Hooks.matches(self.hooks.unschedulable, pod):
            pod['status']['conditions'] = [{
                'type': 'PodScheduled', 'status': 'False', 'reason': 'Unschedulable', 'lastProbeTime': None,
                'lastTransitionTime': timestamp(),
                'message': '0/1 nodes are available: 1 node(s) didn\'t match Pod\'s node affinity/selector.',
            }]
            return
        pod['spec']['nodeName'] = self.default_node
        pod['status']['conditions'] = [{'type': 'PodScheduled', 'status': 'True', 'lastProbeTime': None,
                                        'lastTransitionTime': timestamp()}]
        if Hooks.matches(self.hooks.image_pull_failure, pod) and self._node_ready(self.default_node) is None:
            pod['status']['containerStatuses'] = [
                {'name': c['name'], 'image': c.get('image', ''), 'imageID': '', 'ready': False, 'restartCount': 0,
                 'started': False, 'state': {'waiting': {'reason': 'ImagePullBackOff',
                                                         'message': f'Back-off pulling image "{c.get("image", "")}"'}}}
                for c in pod['spec']['containers']]

    def reschedule(self) -> None:
        """Re-run the scheduler over Pending unbound pods (after a test releases an Unschedulable hook)."""
        with self.lock:
            for pod in list(self.objects[('', 'pods')].values()):
                if not pod['spec'].get('nodeName') and not pod['metadata'].get('deletionTimestamp'):
                    updated = clone(pod)
                    self._schedule_pod(updated)
                    if updated != pod:
                        self._replace_stored(('', 'pods'), pod, updated)

    # ------------------------------------------------------------ update and patch

    def update(self, rtype: ResourceType, namespace: str | None, name: str, body: dict, *, subresource: str | None = None,
               dry_run: bool = False, field_validation: str = 'Warn') -> tuple[dict, list[str]]:
        with self.lock:
            if not isinstance(body, dict):
                raise bad_request('the body of the request was in an unknown format')
            old = self._existing(rtype, namespace, name)
            metadata = body.get('metadata') or {}
            if metadata.get('name') and metadata['name'] != name:
                raise bad_request(f'the name of the object ({metadata["name"]}) does not match the name on the URL ({name})')
            if rtype.namespaced and metadata.get('namespace') and metadata['namespace'] != (namespace or ''):
                raise bad_request('the namespace of the provided object does not match the namespace sent on the request')
            self._check_kind(rtype, body)
            version = metadata.get('resourceVersion')
            if not version and not rtype.unconditional_update:
                raise invalid(rtype, name, [FieldError('FieldValueInvalid', 'metadata.resourceVersion',
                                                       'must be specified for an update', '0x0')])
            self._guard(rtype, namespace, name, version, old)
            return self._write(rtype, old, clone(body), subresource, dry_run, field_validation)

    def patch(self, rtype: ResourceType, namespace: str | None, name: str, content_type: str, patch: object, *,
              subresource: str | None = None, dry_run: bool = False, field_validation: str = 'Warn') -> tuple[dict, list[str]]:
        with self.lock:
            old = self._existing(rtype, namespace, name)
            base = self._decoded(rtype, old)
            kind = content_type.split(';')[0].strip()
            try:
                if kind == 'application/merge-patch+json':
                    new = patching.merge_patch(base, patch)
                elif kind == 'application/json-patch+json':
                    new = patching.json_patch(base, patch)
                elif kind == 'application/strategic-merge-patch+json':
                    if rtype.custom:
                        raise ApiError(415, 'UnsupportedMediaType', 'the body of the request was in an unknown format - '
                                       'accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml')
                    new = patching.strategic_merge(base, patch)
                else:
                    raise ApiError(415, 'UnsupportedMediaType', 'the body of the request was in an unknown format - '
                                   'accepted media types include: application/json-patch+json, application/merge-patch+json, '
                                   'application/apply-patch+yaml')
            except patching.PatchError as error:
                raise ApiError(422 if 'test' in str(error) else 400, 'Invalid' if 'test' in str(error) else 'BadRequest', str(error)) from None
            if not isinstance(new, dict):
                raise bad_request('the patch did not produce an object')
            patched_version = (patch.get('metadata') or {}).get('resourceVersion') if isinstance(patch, dict) else None
            self._guard(rtype, namespace, name, patched_version, old)
            new.setdefault('metadata', {})['resourceVersion'] = old['metadata']['resourceVersion']
            return self._write(rtype, old, new, subresource, dry_run, field_validation)

    def _guard(self, rtype: ResourceType, namespace: str | None, name: str, version: str | None, old: dict) -> None:
        """A write carrying a resourceVersion lands only on that version (and not while hooks.conflicts contests it)."""
        if not version:
            return
        contested = (rtype.plural, (namespace or '') if rtype.namespaced else '', name)
        if self.hooks.conflicts.get(contested, 0) > 0:
            self.hooks.conflicts[contested] -= 1
            raise conflict(rtype, name, OPTIMISTIC_LOCK)
        if version != old['metadata']['resourceVersion']:
            raise conflict(rtype, name, OPTIMISTIC_LOCK)

    def _existing(self, rtype: ResourceType, namespace: str | None, name: str) -> dict:
        obj = self.objects[rtype.key].get(((namespace or '') if rtype.namespaced else '', name))
        if obj is None:
            raise not_found(rtype, name)
        return obj

    def _write(self, rtype: ResourceType, old: dict, new: dict, subresource: str | None, dry_run: bool,
               field_validation: str) -> tuple[dict, list[str]]:
        name = old['metadata']['name']
        stored, old = old, self._decoded(rtype, old)  # judged against the object as read; a write is one if its bytes differ
        if subresource not in (None, 'status'):
            raise ApiError(405, 'MethodNotAllowed', 'the server does not allow this method on the requested resource')
        if subresource == 'status':
            if not rtype.has_status:
                raise ApiError(404, 'NotFound', 'the server could not find the requested resource')
            new = {**clone(old), 'status': new.get('status')}
            if new['status'] is None:
                new.pop('status')
        elif rtype.has_status:
            new.pop('status', None)
            if 'status' in old:
                new['status'] = clone(old['status'])
        new['apiVersion'], new['kind'] = rtype.api_version, rtype.kind
        warnings = self._decode(rtype, new, field_validation)
        metadata = new.setdefault('metadata', {})
        for key in ('uid', 'creationTimestamp', 'name', 'namespace', 'deletionTimestamp', 'deletionGracePeriodSeconds', 'generation'):
            if key in old['metadata']:
                metadata[key] = old['metadata'][key]
            else:
                metadata.pop(key, None)
        terminating = bool(old['metadata'].get('deletionTimestamp'))
        added = set(metadata.get('finalizers') or []) - set(old['metadata'].get('finalizers') or [])
        errors = resources.validate_metadata(metadata, _core_meta(rtype)) + self._validate(rtype, new, old, warnings)
        if terminating and added:
            errors.append(FieldError('FieldValueForbidden', 'metadata.finalizers', 'no new finalizers can be added if the object is being deleted'))
        if errors:
            raise invalid(rtype, name, errors)
        if rtype.custom:
            warnings += resources.custom_finalizer_warnings(metadata.get('finalizers') or [], old['metadata'].get('finalizers'))
        if self._spec_changed(old, new, rtype.has_status):
            metadata['generation'] = old['metadata'].get('generation', 1) + 1
        metadata['resourceVersion'] = old['metadata']['resourceVersion']
        if not metadata.get('finalizers'):
            metadata.pop('finalizers', None)
        if new == stored:
            return clone(stored), warnings  # a no-op write changes nothing, not even the resourceVersion
        if dry_run:
            return new, warnings
        if terminating and not metadata.get('finalizers'):
            self._remove(rtype.key, new)
            return clone(new), warnings
        self._replace_stored(rtype.key, stored, new)
        if rtype.plural == 'customresourcedefinitions':
            self._register_crd(new)
        if rtype.plural == 'nodes':
            self.schedule(0.01, self._expire_unattended_pods)
        return clone(new), warnings

    @staticmethod
    def _spec_changed(old: dict, new: dict, has_status: bool) -> bool:
        """Whether generation moves: any change but metadata (and status, when it is a subresource)."""
        ignored = ('metadata', 'apiVersion', 'kind') + (('status',) if has_status else ())
        return {k: v for k, v in old.items() if k not in ignored} != {k: v for k, v in new.items() if k not in ignored}

    def _store(self, key: tuple[str, str], obj: dict) -> None:
        if len(json.dumps(obj)) > resources.OBJECT_LIMIT:
            raise ApiError(413, 'RequestEntityTooLarge', 'etcdserver: request is too large')
        metadata = obj['metadata']
        self.objects[key][(metadata.get('namespace', ''), metadata['name'])] = obj
        self.by_uid[metadata['uid']] = (key, (metadata.get('namespace', ''), metadata['name']))

    def _replace_stored(self, key: tuple[str, str], old: dict, new: dict) -> None:
        new['metadata']['resourceVersion'] = self._bump()
        self._store(key, new)
        self._emit(key, 'MODIFIED', new, old)

    # ------------------------------------------------------------ delete

    def delete(self, rtype: ResourceType, namespace: str | None, name: str, options: dict, *,
               dry_run: bool = False) -> dict:
        with self.lock:
            obj = self._existing(rtype, namespace, name)
            preconditions = options.get('preconditions') or {}
            if preconditions.get('uid') and preconditions['uid'] != obj['metadata']['uid']:
                raise conflict(rtype, name, f'Precondition failed: UID in precondition: {preconditions["uid"]}, '
                               f'UID in object meta: {obj["metadata"]["uid"]}')
            if preconditions.get('resourceVersion') and preconditions['resourceVersion'] != obj['metadata']['resourceVersion']:
                raise conflict(rtype, name, OPTIMISTIC_LOCK)
            if rtype.key == CRDS and not obj['metadata'].get('deletionTimestamp'):
                return self._terminate_crd(obj, dry_run)
            if dry_run:
                return clone(obj)
            propagation = options.get('propagationPolicy') or ('Orphan' if options.get('orphanDependents') else 'Background')
            grace = self._grace_period(rtype, obj, options)
            metadata = obj['metadata']
            if metadata.get('deletionTimestamp'):
                if rtype.plural == 'pods' and grace is not None and grace < metadata.get('deletionGracePeriodSeconds', 0):
                    return self._terminate_pod(obj, grace)
                return clone(obj)
            if propagation == 'Orphan':
                self._orphan_dependents(metadata['uid'])
            new = clone(obj)
            if propagation == 'Foreground' and self._dependents(metadata['uid']):
                new['metadata'].setdefault('finalizers', []).append('foregroundDeletion')
            if rtype.plural == 'namespaces':
                return self._terminate_namespace(obj)
            if rtype.plural == 'pods' and grace:
                return self._terminate_pod(obj, grace, new)
            if new['metadata'].get('finalizers'):
                new['metadata']['deletionTimestamp'] = timestamp()
                new['metadata']['deletionGracePeriodSeconds'] = 0
                self._replace_stored(rtype.key, obj, new)
                if 'foregroundDeletion' in new['metadata']['finalizers']:
                    self._request_gc()
                return clone(new)
            self._remove(rtype.key, new)
            return clone(new)

    def _grace_period(self, rtype: ResourceType, obj: dict, options: dict) -> int | None:
        if rtype.plural != 'pods':
            return None
        if options.get('gracePeriodSeconds') is not None:
            grace = int(options['gracePeriodSeconds'])
        else:
            grace = int(obj['spec'].get('terminationGracePeriodSeconds', 30))
        unbound = not obj['spec'].get('nodeName')
        finished = obj.get('status', {}).get('phase') in ('Succeeded', 'Failed')
        return 0 if unbound or finished else max(grace, 0)

    def _terminate_pod(self, pod: dict, grace: int, new: dict | None = None) -> dict:
        """Graceful deletion: mark the pod, let its node stop it; 0 removes it at once (force)."""
        new = clone(new or pod)
        if grace == 0 and not new['metadata'].get('finalizers'):
            self._remove(('', 'pods'), new)
            return clone(new)
        new['metadata']['deletionTimestamp'] = timestamp(now() + datetime.timedelta(seconds=grace))
        new['metadata']['deletionGracePeriodSeconds'] = grace
        self._replace_stored(('', 'pods'), pod, new)
        if self._node_ready(new['spec']['nodeName']) is None:
            # No kubelet registered for this node: a stand-in kubelet stops the (imaginary) containers at once.
            delay = grace if self.unattended_pods_use_grace else self.kubelet_delay
            self.schedule(delay, lambda: self._confirm_stopped(new['metadata']['uid']))
        return clone(new)

    def _node_ready(self, node_name: str) -> bool | None:
        """None when no Node object exists (no kubelet registered), else whether it is Ready."""
        node = self.objects[('', 'nodes')].get(('', node_name))
        if node is None:
            return None
        conditions = node.get('status', {}).get('conditions') or []
        return any(c.get('type') == 'Ready' and c.get('status') == 'True' for c in conditions)

    def _confirm_stopped(self, uid: str) -> None:
        with self.lock:
            location = self.by_uid.get(uid)
            if location is None:
                return
            pod = self.objects[location[0]].get(location[1])
            if pod is not None and not pod['metadata'].get('finalizers'):
                self._remove(('', 'pods'), clone(pod))

    def _expire_unattended_pods(self) -> None:
        """Terminating pods whose node has no Node object any more are stopped by the stand-in kubelet."""
        with self.lock:
            for pod in list(self.objects[('', 'pods')].values()):
                node = pod['spec'].get('nodeName')
                if pod['metadata'].get('deletionTimestamp') and node and self._node_ready(node) is None:
                    self.schedule(self.kubelet_delay, lambda uid=pod['metadata']['uid']: self._confirm_stopped(uid))

    def _terminate_namespace(self, namespace: dict) -> dict:
        new = clone(namespace)
        new['metadata']['deletionTimestamp'] = timestamp()
        new['status'] = {'phase': 'Terminating'}
        self._replace_stored(('', 'namespaces'), namespace, new)
        name = namespace['metadata']['name']
        for key, objects in list(self.objects.items()):
            rtype = next((t for t in self.types.values() if t.key == key), None)
            for (ns, obj_name), obj in list(objects.items()):
                if ns == name and rtype is not None:
                    self.delete(rtype, ns, obj_name, {})
        self.schedule(0.05, lambda: self._finish_namespace(name))
        return clone(new)

    def _terminate_crd(self, crd: dict, dry_run: bool) -> dict:
        """A CRD's first delete (etcd.go, REST.Delete): deletionTimestamp, the cleanup finalizer and Terminating=True in
        one update, whatever the propagation policy; the CRD finalizer, informed of it, starts its cleanup."""
        new = with_crd_condition(crd, 'True', 'InstanceDeletionPending',
                                 'CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon')
        metadata = new['metadata']
        metadata['deletionTimestamp'] = timestamp()
        if CRD_CLEANUP_FINALIZER not in (metadata.get('finalizers') or []):
            metadata['finalizers'] = [*(metadata.get('finalizers') or []), CRD_CLEANUP_FINALIZER]
        if dry_run:
            return new
        self._replace_stored(CRDS, crd, new)
        uid = metadata['uid']
        self.schedule(0.01, lambda: self._finalize_crd(uid, 0))
        return clone(new)

    def _finalizing_crd(self, uid: str) -> dict | None:
        """The CRD of this uid while its cleanup is the CRD finalizer's to do (crd_finalizer.go, sync: no work to do
        without a deletionTimestamp and its finalizer)."""
        location = self.by_uid.get(uid)
        crd = self.objects[CRDS].get(location[1]) if location is not None and location[0] == CRDS else None
        if crd is None or not crd['metadata'].get('deletionTimestamp'):
            return None
        return crd if CRD_CLEANUP_FINALIZER in (crd['metadata'].get('finalizers') or []) else None

    def _finalize_crd(self, uid: str, failures: int) -> None:
        """The CRD finalizer's sync (crd_finalizer.go): Terminating=True InstanceDeletionInProgress, then a
        DeleteCollection of the instances in each of their namespaces, each item deleted as a client's delete would
        (its own finalizers hold it, with a deletionTimestamp, until their controllers let go), then the poll."""
        with self.lock:
            crd = self._finalizing_crd(uid)
            if crd is None:
                return
            new = with_crd_condition(crd, 'True', 'InstanceDeletionInProgress', 'CustomResource deletion is in progress')
            if new != crd:
                self._replace_stored(CRDS, crd, new)
            group, plural = crd['spec']['group'], crd['spec']['names']['plural']
            rtype = next((t for t in self.types.values() if t.key == (group, plural)), None)
            for namespace, name in sorted(self.objects[(group, plural)]) if rtype is not None else ():
                with contextlib.suppress(ApiError):
                    self.delete(rtype, namespace or None, name, {})
        self._poll_crd_instances(uid, failures, time.monotonic() + self.crd_cleanup_timeout)

    def _poll_crd_instances(self, uid: str, failures: int, deadline: float) -> None:
        """deleteInstances' PollImmediate: none left, the finalizer comes off with Terminating=False
        InstanceDeletionCompleted in one status update (the CRD goes with it unless another finalizer holds it); still
        some past the bound, InstanceDeletionCheck, and the sync runs again after the workqueue's rate limit (5 ms
        doubled per failure: client-go util/workqueue/default_rate_limiters.go, DefaultControllerRateLimiter)."""
        with self.lock:
            crd = self._finalizing_crd(uid)
            if crd is None:
                return
            group, plural = crd['spec']['group'], crd['spec']['names']['plural']
            if not self.objects[(group, plural)]:
                new = with_crd_condition(crd, 'False', 'InstanceDeletionCompleted', 'removed all instances')
                new['metadata']['finalizers'] = [f for f in new['metadata']['finalizers'] if f != CRD_CLEANUP_FINALIZER]
                if new['metadata']['finalizers']:
                    self._replace_stored(CRDS, crd, new)
                else:
                    del new['metadata']['finalizers']
                    self._remove(CRDS, new)
                return
            if time.monotonic() < deadline:
                self.schedule(self.crd_cleanup_poll, lambda: self._poll_crd_instances(uid, failures, deadline))
                return
            new = with_crd_condition(crd, 'True', 'InstanceDeletionCheck',
                                     'could not confirm zero CustomResources remaining: timed out waiting for the condition')
            if new != crd:
                self._replace_stored(CRDS, crd, new)
        self.schedule(min(0.005 * 2 ** failures, 1000.0), lambda: self._finalize_crd(uid, failures + 1))

    def _finish_namespace(self, name: str) -> None:
        with self.lock:
            # the namespace controller waits for what discovery shows (pkg/controller/namespace/deletion/
            # namespaced_resources_deleter.go): not the stored instances of a CRD no longer served
            served = {t.key for t in self.types.values()}
            if any(ns == name for key, objects in self.objects.items() if key in served for (ns, _) in objects):
                self.schedule(0.1, lambda: self._finish_namespace(name))
                return
            namespace = self.objects[('', 'namespaces')].get(('', name))
            if namespace is not None:
                self._remove(('', 'namespaces'), clone(namespace))

    def _remove(self, key: tuple[str, str], obj: dict) -> None:
        metadata = obj['metadata']
        stored = self.objects[key].pop((metadata.get('namespace', ''), metadata['name']), None)
        if stored is None:
            return
        self.by_uid.pop(metadata['uid'], None)
        obj = clone(obj)
        obj['metadata']['resourceVersion'] = self._bump()
        self._emit(key, 'DELETED', obj, stored)
        if key == ('', 'nodes'):
            self.schedule(0.01, self._expire_unattended_pods)  # the kubelet went away with its node
        if key == ('apiextensions.k8s.io', 'customresourcedefinitions'):
            self._unregister_crd(obj)
        self._request_gc()

    # ------------------------------------------------------------ garbage collection

    def _dependents(self, uid: str) -> list[tuple[tuple[str, str], dict]]:
        return [(key, obj) for key, objects in self.objects.items() for obj in objects.values()
                if any(ref.get('uid') == uid for ref in obj['metadata'].get('ownerReferences') or [])]

    def _orphan_dependents(self, uid: str) -> None:
        for key, obj in self._dependents(uid):
            new = clone(obj)
            new['metadata']['ownerReferences'] = [r for r in obj['metadata']['ownerReferences'] if r.get('uid') != uid]
            if not new['metadata']['ownerReferences']:
                del new['metadata']['ownerReferences']
            self._replace_stored(key, obj, new)

    @contextlib.contextmanager
    def garbage_collector_held(self):
        """The garbage collector behind the API server, for as long as the block lasts: in Kubernetes it is
        kube-controller-manager's (pkg/controller/garbagecollector), not the API server's; a background deletion (the
        default) removes the owner at once and its dependents stay, unchanged and with no deletionTimestamp, until
        the collector has seen the owner go and deleted them ("the garbage collector controller ... cleans up the
        dependent objects in the background", kubernetes.io/docs/concepts/architecture/garbage-collection), however
        long that takes (a controller-manager restarting, a collector waiting on its graph's sync). Ends with a collection."""
        self._gc_held = True
        try:
            yield
        finally:
            self._gc_held = False
            self._request_gc()

    def _request_gc(self) -> None:
        """Run the garbage collector soon, once for a burst of deletions (it is asynchronous in Kubernetes too)."""
        if not self._gc_pending:
            self._gc_pending = True
            self.schedule(0.01, self.collect_garbage)

    def _owner(self, child: dict, ref: dict) -> dict | None:
        """The live object a reference names, looked up as the garbage collector does: by kind, name and uid,
        in the child's namespace for a namespaced owner; None when absent (an unknown kind counts as present)."""
        group = ref.get('apiVersion', '').rpartition('/')[0]
        rtype = next((t for t in self.types.values() if t.group == group and t.kind == ref.get('kind')), None)
        if rtype is None:
            return {'metadata': {}}
        namespace = child['metadata'].get('namespace', '') if rtype.namespaced else ''
        owner = self.objects[rtype.key].get((namespace, ref.get('name')))
        return owner if owner is not None and owner['metadata']['uid'] == ref.get('uid') else None

    def collect_garbage(self) -> None:
        """The garbage collector: delete dependents whose owners are all gone (or deleting in foreground)."""
        with self.lock:
            self._gc_pending = False
            if self._gc_held:
                return
            for key, objects in list(self.objects.items()):
                rtype = next((t for t in self.types.values() if t.key == key), None)
                for obj in list(objects.values()):
                    refs = obj['metadata'].get('ownerReferences') or []
                    if not refs or rtype is None or obj['metadata'].get('deletionTimestamp'):
                        continue
                    owners = [self._owner(obj, ref) for ref in refs]
                    gone = all(owner is None for owner in owners)
                    foreground = any(owner is not None and 'foregroundDeletion' in (owner['metadata'].get('finalizers') or [])
                                     for owner in owners)
                    if gone or foreground:
                        metadata = obj['metadata']
                        self.delete(rtype, metadata.get('namespace'), metadata['name'],
                                    {'propagationPolicy': 'Foreground' if foreground else 'Background'})
            for key, objects in list(self.objects.items()):
                for obj in list(objects.values()):
                    finalizers = obj['metadata'].get('finalizers') or []
                    if 'foregroundDeletion' in finalizers and not self._blocking_dependents(obj['metadata']['uid']):
                        new = clone(obj)
                        new['metadata']['finalizers'] = [f for f in finalizers if f != 'foregroundDeletion']
                        if new['metadata']['finalizers']:
                            self._replace_stored(key, obj, new)
                        else:
                            del new['metadata']['finalizers']
                            self._remove(key, new)

    def _blocking_dependents(self, uid: str) -> list:
        return [obj for _, obj in self._dependents(uid)
                if any(r.get('uid') == uid and r.get('blockOwnerDeletion') for r in obj['metadata']['ownerReferences'])]

    # ------------------------------------------------------------ kubelet and eviction helpers

    def evict(self, namespace: str, name: str, message: str = 'Eviction API: evicting') -> dict:
        """What the eviction API (or a preempting scheduler) does: DisruptionTarget condition, then graceful delete."""
        with self.lock:
            pods = self.type_of('', 'v1', 'pods')
            pod = self._existing(pods, namespace, name)
            new = clone(pod)
            conditions = [c for c in new.setdefault('status', {}).get('conditions') or [] if c.get('type') != 'DisruptionTarget']
            conditions.append({'type': 'DisruptionTarget', 'status': 'True', 'reason': 'EvictionByEvictionAPI',
                               'message': message, 'lastProbeTime': None, 'lastTransitionTime': timestamp()})
            new['status']['conditions'] = conditions
            self._replace_stored(pods.key, pod, new)
            return self.delete(pods, namespace, name, {})

    def bind(self, namespace: str, name: str, node: str | None) -> None:
        """The pods/binding subresource: a scheduler assigns an unbound pod to a node, once."""
        with self.lock:
            pods = self.type_of('', 'v1', 'pods')
            pod = self._existing(pods, namespace, name)
            if pod['spec'].get('nodeName'):
                raise ApiError(409, 'Conflict', f'pod {name} is already assigned to node "{pod["spec"]["nodeName"]}"')
            if not node:
                raise invalid(pods, name, [FieldError('FieldValueRequired', 'target.name')])
            new = clone(pod)
            new['spec']['nodeName'] = node
            self._replace_stored(pods.key, pod, new)

    def lose_node(self, name: str = 'local-node') -> None:
        """The node stops reporting (Ready=Unknown): its deleted pods stay terminating until force-deleted."""
        with self.lock:
            nodes = self.type_of('', 'v1', 'nodes')
            if self.objects[nodes.key].get(('', name)) is None:
                self.create(nodes, None, {'apiVersion': 'v1', 'kind': 'Node', 'metadata': {'name': name}})
            node = self.objects[nodes.key][('', name)]
            status = {'conditions': [{'type': 'Ready', 'status': 'Unknown', 'reason': 'NodeStatusUnknown',
                                      'message': 'Kubelet stopped posting node status.', 'lastTransitionTime': timestamp()}]}
            self._write(nodes, node, {**clone(node), 'status': status}, 'status', False, 'Ignore')

    def report_pod(self, namespace: str, name: str, status: dict) -> dict:
        """Write a pod's status as its kubelet would (for tests without a local node)."""
        with self.lock:
            pods = self.type_of('', 'v1', 'pods')
            pod = self._existing(pods, namespace, name)
            merged = patching.strategic_merge(pod.get('status') or {}, status)
            return self._write(pods, pod, {**clone(pod), 'status': merged}, 'status', False, 'Ignore')[0]


def condition_true(obj: dict, kind: str) -> bool:
    return any(c.get('type') == kind and c.get('status') == 'True' for c in (obj.get('status') or {}).get('conditions') or [])


def with_crd_condition(crd: dict, status: str, reason: str, message: str) -> dict:
    """A copy of `crd` with its Terminating condition set as SetCRDCondition sets one (apiextensions-apiserver
    pkg/apihelpers/helpers.go): lastTransitionTime moves only when the status does."""
    new = clone(crd)
    conditions = new.setdefault('status', {}).setdefault('conditions', [])
    existing = next((c for c in conditions if c.get('type') == 'Terminating'), None)
    if existing is None:
        existing = {'type': 'Terminating', 'lastTransitionTime': timestamp()}
        conditions.append(existing)
    elif existing.get('status') != status:
        existing['lastTransitionTime'] = timestamp()
    existing.update(status=status, reason=reason, message=message)
    return new


def container_terminated(name: str, exit_code: int, message: str = '', reason: str | None = None,
                         restarts: int = 0) -> dict:
    """A containerStatuses entry for a container that ended (for Store.report_pod)."""
    return {'name': name, 'ready': False, 'restartCount': restarts, 'started': False, 'image': '', 'imageID': '',
            'state': {'terminated': {'exitCode': exit_code, 'reason': reason or ('Completed' if exit_code == 0 else 'Error'),
                                     'message': message, 'startedAt': timestamp(), 'finishedAt': timestamp()}}}

