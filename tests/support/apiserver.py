"""The Kubernetes API stand-in over real HTTP: kmock's server and request parsing, our realism layer.

kmock 0.8 serves the HTTP socket, parses every request and keeps its reaction DSL, so a test
can still inject a fault (``standin.handler['patch', kmock.resource('', 'v1', 'pods')] << 500``).
Everything kmock's KubernetesEmulator would answer is answered here instead, from `Store`.
"""
import asyncio
import base64
import collections
import contextlib
import copy
import email.utils
import functools
import itertools
import json
import logging
import pathlib
import posixpath
import re
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Self

import aiohttp.web
import attrs
import kmock
import yaml

from tests.support import openapi, tables
from tests.support.admission import rbac_forbidden
from tests.support.crdschema import FieldError
from tests.support.selectors import (
    SelectorError,
    fields_match,
    labels_match,
    parse_field_selector,
    parse_label_selector,
)
from tests.support.store import (
    ApiError,
    Compacted,
    Store,
    WatchEvent,
    bad_request,
    invalid_kind,
)
from tests.support.store import now as store_now

logger = logging.getLogger('kuberl.standin')
RECENT_REQUESTS = 200  # kmock records every request; a short window keeps each one O(1)
BOOKMARK_SECONDS = 1.0
# The API server reads at most MaxRequestBodyBytes of a request (3 MiB: staging/src/k8s.io/apiserver/pkg/server/
# config.go) and answers 413 "Request entity too large: limit is 3145728" past it (limitedReadBody in
# pkg/endpoints/handlers/rest.go); what it then stores is bounded by etcd's 1.5 MiB (Store._store).
# aiohttp's own default is 1 MiB: a 1.2 MB job, which a real server stores, was refused here.
MAX_REQUEST_BODY_BYTES = 3 * 1024 * 1024
# The API server decodes a request body with Go's encoding/json scanner (sigs.k8s.io/json's copy; the json
# serializer's SimpleMetaFactory.Interpret reads the body with encoding/json first), which refuses nesting past
# maxNestingDepth = 10000 (encoding/json/scanner.go, pushParseState: "exceeded max depth"); the handler answers 400
# "couldn't get version/kind; json parse error: invalid character '{' exceeded max depth" (transformDecodeError).
# Up to that depth it stores and serves the object, a custom resource's x-kubernetes-preserve-unknown-fields
# subtree included; Python's json recurses once per level, so the stand-in's recursion limit lets it hold as much.
MAX_JSON_NESTING = 10_000
_JSON_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+"')
_BRACKET_DEPTH = {ord('{'): 1, ord('['): 1, ord('}'): -1, ord(']'): -1}
_NOT_BRACKETS = bytes(c for c in range(256) if c not in _BRACKET_DEPTH)
WRITE_VERBS = frozenset({'create', 'update', 'patch', 'delete', 'deletecollection'})
PUBLIC_INFO_PATHS = frozenset({'/healthz', '/livez', '/readyz', '/version'})  # ClusterRole system:public-info-viewer


@dataclass(frozen=True)
class ApiCall:
    """One request as RBAC sees it (verb, group, resource, namespace, subresource) plus who made it."""
    verb: str
    group: str
    resource: str
    namespace: str
    subresource: str
    agent: str


@dataclass(frozen=True)
class Bookmark:
    """A bookmark queued on a watch behind the events before it: every event up to `rv` precedes it."""
    rv: int


# Queued on a watch whose resource's storage was destroyed (its CRD removed): the stream ends behind what preceded it.
STORAGE_DESTROYED = object()


@dataclass(frozen=True)
class Route:
    group: str
    version: str
    plural: str
    namespace: str | None
    name: str | None
    subresource: str | None


def parse_route(path: str) -> Route | None:
    parts = [p for p in path.split('/') if p]
    if len(parts) >= 2 and parts[0] == 'api':
        group, version, rest = '', parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == 'apis':
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    if not rest:
        return None
    namespace = None
    if rest[0] == 'namespaces' and len(rest) >= 3 and rest[2] not in ('status', 'finalize'):
        namespace, rest = rest[1], rest[2:]
    plural, name = rest[0], rest[1] if len(rest) > 1 else None
    subresource = '/'.join(rest[2:]) or None
    return Route(group, version, plural, namespace, name, subresource)


def _agent(headers: dict) -> str:
    agent = headers.get('User-Agent', '')
    return agent.split('/')[0].split(' ')[0] or 'unknown'


# A list's continue token, as the API server's storage writes it (staging/src/k8s.io/apiserver/pkg/storage/
# continue.go, EncodeContinue/DecodeContinue): base64url, unpadded, of {"v": "meta.k8s.io/v1", "rv": the first page's
# revision (-1: the latest), "start": the key to go on from, relative to the type's prefix}; every page is served at
# that revision. Once it is compacted, etcd3's store.go answers 410 Expired with this message (compactedContinue).
CONTINUE_VERSION = 'meta.k8s.io/v1'
CONTINUE_COMPACTED = (
    'The provided continue parameter is too old to display a consistent list result. You can start a new list without'
    ' the continue parameter, or use the continue token in this response to retrieve the remainder of the results.'
    ' Continuing with the provided token results in an inconsistent list - objects that were created, modified, or'
    ' deleted between the time the first chunk was returned and now may show up in the list.')


def object_key(obj: dict) -> str:
    """The object's storage key under its type's prefix: `namespace/name`, or `name` for a cluster-scoped one."""
    metadata = obj['metadata']
    return f"{metadata['namespace']}/{metadata['name']}" if metadata.get('namespace') else metadata['name']


def encode_continue(start_key: str, revision: int) -> str:
    raw = json.dumps({'v': CONTINUE_VERSION, 'rv': revision, 'start': start_key}, separators=(',', ':'))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip('=')


def decode_continue(token: str) -> tuple[str, int]:
    """(start key, revision) of a token, as DecodeContinue reads it; a 400 in its words for one it cannot read."""
    def invalid(why: str) -> ApiError:  # the store's wrapping (etcd3/store.go, GetList)
        return bad_request(f'invalid continue token: continue key is not valid{why}')

    try:
        decoded = json.loads(base64.urlsafe_b64decode(token + '=' * (-len(token) % 4)))
    except (ValueError, TypeError) as error:
        raise invalid(f': {error}') from None
    if not isinstance(decoded, dict) or decoded.get('v') != CONTINUE_VERSION:
        version = decoded.get('v') if isinstance(decoded, dict) else None
        raise invalid(f': server does not recognize this encoded version {version or ""}'.rstrip())
    start, revision = decoded.get('start'), decoded.get('rv')
    if isinstance(revision, bool) or (isinstance(revision, int) and not -2**63 <= revision < 2**63):
        # encoding/json into continueToken's int64 field refuses these (Python reads true as 1, and any size)
        what = 'bool' if isinstance(revision, bool) else f'number {revision}'
        raise invalid(f': json: cannot unmarshal {what} into Go struct field continueToken.rv of type int64')
    if not isinstance(revision, int) or revision == 0:
        raise invalid(f': incorrect encoded start resourceVersion (version {CONTINUE_VERSION})')
    if not isinstance(start, str) or not start:
        raise invalid(f': encoded start key empty (version {CONTINUE_VERSION})')
    key = start if start.startswith('/') else '/' + start
    if posixpath.normpath(key) != key:  # path.Clean: a key cannot climb above the type's prefix
        raise invalid(f': {start}')
    return key[1:], revision


def too_large_resource_version(asked: int, current: int) -> ApiError:
    """storage.NewTooLargeResourceVersionError(asked, current, 0) as the client reads it (storage/errors.go)."""
    return ApiError(504, 'Timeout', f'Timeout: Too large resource version: {asked}, current: {current}',
                    {'causes': [{'reason': 'ResourceVersionTooLarge', 'message': 'Too large resource version'}]})


@attrs.define(kw_only=True)
class StandinHandler(kmock.RawHandler):
    """kmock's RawHandler with the realism layer as its answer to every request not caught by a test reaction."""

    store: Store = attrs.field(factory=Store)
    calls: collections.Counter = attrs.field(factory=collections.Counter)
    bookmark_seconds: float = BOOKMARK_SECONDS
    # Bearer tokens the stand-in accepts; None: authentication off, every request is trusted.
    tokens: set[str] | None = None
    unauthorized: int = 0  # requests answered 401
    # A fault hook: the next N watch requests whose path ends with this plural are answered with an
    # HTTP status 410 Expired instead of a stream (the form a LIST with an expired continue token
    # takes, and the one proxies and aggregated APIs give a watch: kubernetes.io/docs/reference/
    # using-api/api-concepts/#410-gone-responses), not an ERROR event inside the stream.
    watch_gone: dict[str, int] = attrs.field(factory=dict)
    # A fault hook: the next watch requests whose path ends with a plural here are accepted and then
    # answered by one ERROR event carrying the listed Status (one per watch, in order), the stream then
    # closed. This is how the real API server fails a watch it has already accepted for any reason but
    # an old resourceVersion: the watch cache's newErrWatcher (staging/src/k8s.io/apiserver/pkg/storage/
    # cacher/cacher.go: "once we have passed authn/authz/admission ... other errors must fail with a
    # watch event of type ERROR, rather than a directly returned error"), e.g. its 3 s wait for a
    # resourceVersion it has not seen yet ending in storage.NewTooLargeResourceVersionError (a 504 Timeout,
    # staging/src/k8s.io/apiserver/pkg/storage/errors.go), or any other storage error as a 500 InternalError.
    watch_errors: dict[str, list[ApiError]] = attrs.field(factory=dict)
    # A fault hook: the next list requests of a plural here are answered with the listed errors, one per
    # request, in order: what the real API server answers a list its storage fails. An etcd error
    # ("etcdserver: request timed out", "leader changed") is no StorageError, so InterpretListError
    # (staging/src/k8s.io/apiserver/pkg/registry/generic/registry) returns it as it is, and
    # ErrorToAPIStatus (staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/status.go:
    # "apiserver received an error that is not an metav1.Status") answers 500, reason Unknown (empty,
    # so omitted), the error's own text as the message; an unreachable storage is a 504 ServerTimeout.
    list_errors: dict[str, list[ApiError]] = attrs.field(factory=dict)
    # A fault hook: the next N list or watch requests of a plural here are shed as API Priority and Fairness
    # (and the max-in-flight filter) shed load, before authorization and any handler: 429, `Retry-After: 1`,
    # and a plain-text body, not a Status (tooManyRequests in staging/src/k8s.io/apiserver/pkg/server/filters/
    # maxinflight.go, which priority-and-fairness.go calls too: w.Header().Set("Retry-After", retryAfter);
    # http.Error(w, "Too many requests, please try again later.", http.StatusTooManyRequests)).
    throttled: dict[str, int] = attrs.field(factory=dict)
    # A fault hook: the next N requests of a (verb, resource) here, writes included ('create', 'pods'),
    # ('patch', 'rltrainingjobs/status'), are shed as `throttled` sheds lists: the same filters judge every
    # request that is not exempt, writes too (maxinflight.go: `if !nonMutatingRequestVerbs.Has(requestInfo.Verb)
    # { c = mutatingChan }`, the --max-mutating-requests-inflight budget, whose overflow gets the same
    # tooManyRequests), so a write gets the same 429, Retry-After: 1 and plain-text body, before authorization.
    shed: dict[tuple[str, str], int] = attrs.field(factory=dict)
    # A fault hook: RBAC without these (verb, plural) pairs. Every such request is answered 403 Forbidden
    # before it is served, as the real API server's authorization filter answers it
    # (admission.rbac_forbidden cites the source), a list and a watch alike.
    # A subresource is its own resource to RBAC, named as a rule names it: ('patch', 'rltrainingjobs/status').
    # A triple (verb, plural, namespace) refuses it in that namespace only: a namespaced install's grant is a
    # RoleBinding per namespace, and the authorizer reads only the RoleBindings of the request's namespace
    # (VisitRulesFor, pkg/registry/rbac/validation/rule.go: ClusterRoleBindings, then RoleBindings "in namespace"),
    # so one missing RoleBinding refuses that namespace alone.
    denied: set[tuple[str, ...]] = attrs.field(factory=set)

    def __attrs_post_init__(self) -> None:
        self._requests = collections.deque(maxlen=RECENT_REQUESTS)

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        raw_request._client_max_size = MAX_REQUEST_BODY_BYTES
        try:
            if _nesting(await raw_request.read()) > MAX_JSON_NESTING:
                too_deep = bad_request("couldn't get version/kind; json parse error: invalid character '{' exceeded max depth")
                return _json(too_deep.status(), 400)
            request = await kmock.Request._parse(raw_request, id=len(self._requests))
        except aiohttp.web.HTTPRequestEntityTooLarge:
            too_large = ApiError(413, 'RequestEntityTooLarge', f'Request entity too large: limit is {MAX_REQUEST_BODY_BYTES}')
            return _json(too_large.status(), 413)
        except ValueError:  # kmock's path parser fails on /api/v1/namespaces; the fields we read are these
            request = kmock.Request(raw_request=raw_request, url=raw_request.url, method=raw_request.method,
                                    params=dict(raw_request.query), headers=dict(raw_request.headers),
                                    body=await raw_request.read(), data=await _json_body(raw_request))
        self._requests.append(request)
        try:
            response = await self._handle(request)
        except Exception as error:
            logger.exception('stand-in failed on %s %s', raw_request.method, raw_request.path_qs)
            response = _json(ApiError(500, 'InternalError', f'stand-in error: {error!r}').status(), 500)
        if not response.prepared:
            response.headers['Date'] = _http_date()
        return response

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        refused = self._authenticate(request)
        if refused is not None:
            return refused
        if self._payloads:
            with contextlib.suppress(NotImplementedError):
                return await super()._handle(request)
        try:
            return await self._serve(request)
        except ApiError as error:
            return _json(error.status(), error.code)
        except SelectorError as error:
            return _json(bad_request(str(error)).status(), 400)

    # ------------------------------------------------------------ authentication

    def _authenticate(self, request: kmock.Request) -> aiohttp.web.Response | None:
        """kube-apiserver's WithAuthentication filter runs before every handler
        (staging/src/k8s.io/apiserver/pkg/endpoints/filters/authentication.go): credentials no
        authenticator accepts get `Unauthorized`, i.e. apierrors.NewUnauthorized("Unauthorized"),
        a 401 Status with reason Unauthorized. A request without credentials is system:anonymous,
        whom only system:public-info-viewer's paths (health, version) let through; else 403."""
        if self.tokens is None:
            return None
        scheme, _, token = request.headers.get('Authorization', '').partition(' ')
        if scheme.lower() == 'bearer':
            if token in self.tokens:
                return None
            self.unauthorized += 1
            return _json(ApiError(401, 'Unauthorized', 'Unauthorized').status(), 401)
        path = request.url.path.rstrip('/') or '/'
        if path in PUBLIC_INFO_PATHS:
            return None
        method = str(getattr(request.method, 'value', request.method))
        route = parse_route(path)
        if route is None:
            message = f'forbidden: User "system:anonymous" cannot {method.lower()} path "{path}"'
        else:
            verb = self._verb(method, route, dict(request.params))
            where = f'in the namespace "{route.namespace}"' if route.namespace else 'at the cluster scope'
            message = (f'{route.plural} is forbidden: User "system:anonymous" cannot {verb} resource "{route.plural}" '
                       f'in API group "{route.group}" {where}')
        return _json(ApiError(403, 'Forbidden', message).status(), 403)

    # ------------------------------------------------------------ dispatch

    async def _serve(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        path = request.url.path.rstrip('/') or '/'
        method = request.method.value if hasattr(request.method, 'value') else str(request.method)
        if method == 'GET' and path in ('/healthz', '/readyz', '/livez'):
            return aiohttp.web.Response(text='ok')
        if method == 'GET' and path == '/version':
            return _json(VERSION)
        if method == 'GET' and (path.startswith('/openapi') or path in ('/', '/api', '/apis') or self._is_discovery(path)):
            return _json(self._discovery(path, request.headers.get('Accept', '')))
        route = parse_route(path)
        if route is None:
            raise ApiError(404, 'NotFound', 'the server could not find the requested resource')
        rtype = self.store.type_of(route.group, route.version, route.plural)
        if route.namespace is not None and not rtype.namespaced:
            raise ApiError(404, 'NotFound', 'the server could not find the requested resource')
        params = dict(request.params)
        verb = self._verb(method, route, params)
        self.calls[ApiCall(verb, route.group, route.plural, route.namespace or '', route.subresource or '',
                           _agent(request.headers))] += 1
        if verb in ('list', 'watch') and self.throttled.get(route.plural, 0) > 0:
            self.throttled[route.plural] -= 1
            return aiohttp.web.Response(status=429, text='Too many requests, please try again later.\n',
                                        headers={'Retry-After': '1', 'X-Content-Type-Options': 'nosniff'})
        resource = f'{route.plural}/{route.subresource}' if route.subresource else route.plural
        if self.shed.get((verb, resource), 0) > 0:
            self.shed[verb, resource] -= 1
            return aiohttp.web.Response(status=429, text='Too many requests, please try again later.\n',
                                        headers={'Retry-After': '1', 'X-Content-Type-Options': 'nosniff'})
        if (verb, resource) in self.denied or (verb, resource, route.namespace) in self.denied:
            raise rbac_forbidden(verb, rtype, route.namespace, route.name or '', subresource=route.subresource or '')
        _check_options(verb, params)
        dry_run = params.get('dryRun') == 'All'
        validation = params.get('fieldValidation', 'Warn')
        if route.subresource and route.subresource not in rtype.subresources:
            raise ApiError(404, 'NotFound', 'the server could not find the requested resource')
        match verb:
            case 'watch':
                return await self._watch(request, rtype, route, params)
            case 'list':
                return self._list(request, rtype, route, params)
            case 'get':
                if route.subresource == 'log':
                    return await self._pod_log(rtype, route, params)
                obj = self.store.get(rtype, route.namespace, route.name)
                if tables.wants_table(request.headers.get('Accept', '')):
                    return _json(tables.table(rtype, [obj], obj['metadata']['resourceVersion'], params.get('includeObject', 'Metadata')))
                return _json(obj)
            case 'create':
                if route.subresource == 'eviction':
                    self.store.evict(route.namespace, route.name)
                    return _json({'kind': 'Status', 'apiVersion': 'v1', 'metadata': {}, 'status': 'Success', 'code': 201}, 201)
                if route.subresource == 'binding':
                    return self._bind(route, request.data)
                obj, warnings = self.store.create(rtype, route.namespace, request.data, dry_run=dry_run, field_validation=validation)
                return _json(obj, 201, warnings)
            case 'update':
                obj, warnings = self.store.update(rtype, route.namespace, route.name, request.data, subresource=route.subresource,
                                                  dry_run=dry_run, field_validation=validation)
                return _json(obj, 200, warnings)
            case 'patch':
                content_type = request.headers.get('Content-Type', '')
                if content_type.startswith('application/apply-patch'):
                    return self._server_side_apply(request, rtype, route, params, dry_run)
                obj, warnings = self.store.patch(rtype, route.namespace, route.name, content_type, request.data,
                                                 subresource=route.subresource, dry_run=dry_run, field_validation=validation)
                return _json(obj, 200, warnings)
            case 'delete':
                options = dict(request.data) if isinstance(request.data, dict) else {}
                for key in ('gracePeriodSeconds', 'propagationPolicy'):
                    if key in params:
                        options[key] = params[key]
                return _json(self.store.delete(rtype, route.namespace, route.name, options, dry_run=dry_run))
            case 'deletecollection':
                items, _ = self.store.list_objects(rtype, route.namespace, parse_label_selector(params.get('labelSelector')),
                                           parse_field_selector(params.get('fieldSelector'), rtype.field_selectors))
                for item in items:
                    with contextlib.suppress(ApiError):
                        self.store.delete(rtype, route.namespace, item['metadata']['name'], {})
                return _json({'kind': 'Status', 'apiVersion': 'v1', 'metadata': {}, 'status': 'Success'})
        raise ApiError(405, 'MethodNotAllowed', 'the server does not allow this method on the requested resource')

    @staticmethod
    def _verb(method: str, route: Route, params: dict) -> str:
        if method == 'GET':
            if params.get('watch') in ('true', '1'):
                return 'watch'
            return 'get' if route.name else 'list'
        return {
            'POST': 'create', 'PUT': 'update', 'PATCH': 'patch',
            'DELETE': 'delete' if route.name else 'deletecollection',
        }.get(method, method.lower())

    def _bind(self, route: Route, binding: dict) -> aiohttp.web.StreamResponse:
        self.store.bind(route.namespace, route.name, ((binding or {}).get('target') or {}).get('name'))
        return _json({'kind': 'Status', 'apiVersion': 'v1', 'metadata': {}, 'status': 'Success', 'code': 201}, 201)

    def _server_side_apply(self, request: kmock.Request, rtype, route: Route, params: dict, dry_run: bool) -> aiohttp.web.Response:
        """Server-side apply, approximated: create when absent, else merge the applied configuration
        (no managedFields, so fields dropped from the configuration are not removed, and no conflicts)."""
        if not params.get('fieldManager'):
            raise ApiError(422, 'Invalid', 'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
                           'is required for apply patch')
        try:
            applied = yaml.safe_load(request.body or b'{}')
        except yaml.YAMLError as error:
            raise bad_request(f'error decoding YAML: {error}') from None
        validation = params.get('fieldValidation', 'Strict')
        if self.store.find(rtype.group, rtype.plural, route.namespace or '', route.name) is None:
            obj, warnings = self.store.create(rtype, route.namespace, applied, dry_run=dry_run, field_validation=validation)
            return _json(obj, 201, warnings)
        applied.get('metadata', {}).pop('resourceVersion', None)
        obj, warnings = self.store.patch(rtype, route.namespace, route.name, 'application/merge-patch+json', applied,
                                         subresource=route.subresource, dry_run=dry_run, field_validation=validation)
        return _json(obj, 200, warnings)

    async def _pod_log(self, rtype, route: Route, params: dict) -> aiohttp.web.StreamResponse:
        """What the API server does for `kubectl logs`: ask the pod's node's kubelet, on the port its Node reports."""
        pod = self.store.get(rtype, route.namespace, route.name)
        containers = [c['name'] for c in pod['spec']['containers']]
        container = params.get('container') or (containers[0] if len(containers) == 1 else None)
        if container is None:
            raise bad_request(f'a container name must be specified for pod {route.name}, choose one of: [{" ".join(containers)}]')
        node_name = pod['spec'].get('nodeName')
        if not node_name:
            raise bad_request(f'pod {route.name} does not have a host assigned')
        node = self.store.find('', 'nodes', '', node_name) or {}
        port = ((node.get('status') or {}).get('daemonEndpoints') or {}).get('kubeletEndpoint', {}).get('Port')
        if not port:
            raise ApiError(500, 'InternalError', f'no kubelet serves node "{node_name}"')
        query = {k: v for k, v in params.items() if k in ('tailLines', 'limitBytes')}
        url = f'http://127.0.0.1:{port}/containerLogs/{route.namespace}/{route.name}/{container}'
        async with aiohttp.ClientSession() as session, session.get(url, params=query) as reply:
            text = await reply.text()
            if reply.status != 200:
                raise ApiError(reply.status, 'BadRequest', text.strip())
        return aiohttp.web.Response(text=text, content_type='text/plain')

    # ------------------------------------------------------------ list and watch

    def _list(self, request: kmock.Request, rtype, route: Route, params: dict) -> aiohttp.web.StreamResponse:
        if self.list_errors.get(rtype.plural):
            raise self.list_errors[rtype.plural].pop(0)
        labels = parse_label_selector(params.get('labelSelector'))
        fields = parse_field_selector(params.get('fieldSelector'), rtype.field_selectors)
        token = params.get('continue')
        limit = _int64_param(params, 'limit') or 0
        version, match = params.get('resourceVersion') or '', params.get('resourceVersionMatch') or ''
        _validate_list_options(version, match, token)
        start_key, at = '', None
        if token:
            if version not in ('', '0'):
                raise bad_request('specifying resource version is not allowed when using continue')
            start_key, token_revision = decode_continue(token)
            if token_revision > self.store.revision:
                # etcd answers a read at a future revision with ErrFutureRev, which store.go's GetList turns into
                # storage.NewTooLargeResourceVersionError: a 504 Timeout (storage/errors.go, apierrors.NewTimeoutError)
                raise too_large_resource_version(token_revision, self.store.revision)
            at = token_revision if token_revision > 0 else None  # -1: the rest at the latest revision
        elif re.fullmatch(r'[0-9]+', version) and int(version) > 0:  # str.isdigit() takes '²', which int() refuses
            # Exact, and the legacy form with a limit (store.go: `case "": … Limit > 0 && *fromRV > 0`), read at that
            # revision; NotOlderThan and the legacy form without one read the latest. Either is 504 Too large past the
            # store's revision (validateMinimumResourceVersion; the watch cache's wait ends in the same error).
            if int(version) > self.store.revision:
                raise too_large_resource_version(int(version), self.store.revision)
            if match == 'Exact' or (not match and limit > 0):
                at = int(version)
        try:
            items, revision = self.store.list_objects(rtype, route.namespace, labels, fields, at=at)
        except Compacted:
            if not token:  # etcd3/errors.go interpretListError, not paging: ResourceExpired
                return _json(ApiError(410, 'Expired', 'The resourceVersion for the provided list is too old.').status(), 410)
            # etcd3's store.go (compactedContinue): 410 Expired, with a token for the rest at the latest revision
            expired = ApiError(410, 'Expired', CONTINUE_COMPACTED).status()
            expired['metadata']['continue'] = encode_continue(start_key, -1)
            return _json(expired, 410)
        # etcd's order: by key, which a token's start key continues (a namespace "a-b" before "a", as bytes go)
        items = sorted((item for item in items if object_key(item) >= start_key), key=object_key)
        # etcd3/store.go GetList: only a positive limit pages (`opts.Predicate.Limit > 0`); 0 or less lists all
        page = items[:limit] if limit > 0 else items
        metadata = {'resourceVersion': revision}
        # a full page has more after it: without selectors, items are every key; with them, keys they dropped count too
        if limit > 0 and len(page) == limit and (len(items) > limit if not (labels or fields) else
                                                  self._keys_after(rtype, route.namespace, object_key(page[-1]), at)):
            metadata['continue'] = encode_continue(object_key(page[-1]) + '\x00', int(revision))
            if not labels and not fields:  # store.go: a count only for an empty predicate (it counts every key)
                metadata['remainingItemCount'] = len(items) - limit
        if tables.wants_table(request.headers.get('Accept', '')):
            table = tables.table(rtype, page, revision, params.get('includeObject', 'Metadata'))
            table['metadata'].update({k: v for k, v in metadata.items() if k != 'resourceVersion'})
            return _json(table)
        return _json({'kind': f'{rtype.kind}List', 'apiVersion': rtype.api_version, 'metadata': metadata, 'items': page})

    def _keys_after(self, rtype, namespace: str | None, last_key: str, at: int | None) -> bool:
        """Whether etcd holds keys after a full page's last, matching the selectors or not: store.go takes its
        hasMore from etcd's range before filtering, so a page filled by its last match still carries a token."""
        everything, _ = self.store.list_objects(rtype, namespace, [], [], at=at)
        return any(object_key(item) > last_key for item in everything)

    async def _watch(self, request: kmock.Request, rtype, route: Route, params: dict) -> aiohttp.web.StreamResponse:
        if self.watch_gone.get(rtype.plural, 0) > 0:
            self.watch_gone[rtype.plural] -= 1
            gone = ApiError(410, 'Expired', f'too old resource version: {params.get("resourceVersion")} (fault hook)')
            return _json(gone.status(), 410)
        if self.watch_errors.get(rtype.plural):
            response = await _stream_start(request)
            await response.write(_line({'type': 'ERROR', 'object': self.watch_errors[rtype.plural].pop(0).status()}))
            await response.write_eof()
            return response
        labels = parse_label_selector(params.get('labelSelector'))
        fields = parse_field_selector(params.get('fieldSelector'), rtype.field_selectors)
        as_table = tables.wants_table(request.headers.get('Accept', ''))
        bookmarks = params.get('allowWatchBookmarks') in ('true', '1')
        timeout = _int64_param(params, 'timeoutSeconds')
        loop = asyncio.get_running_loop()
        # One ordered queue per watch, appended to under the store's lock by the writer's own thread (deque appends
        # are thread-safe), so its order is the store's order; `wakeup` only tells the stream to look.
        pending: collections.deque[WatchEvent | Bookmark | object] = collections.deque()
        wakeup = asyncio.Event()
        revision = [0]

        def visible(obj: dict | None) -> bool:
            if obj is None:
                return False
            metadata = obj['metadata']
            if route.name and metadata['name'] != route.name:
                return False
            if route.namespace and metadata.get('namespace') != route.namespace:
                return False
            return labels_match(labels, metadata.get('labels')) and fields_match(fields, obj)

        def deliver(event: WatchEvent) -> None:
            pending.append(event)
            loop.call_soon_threadsafe(wakeup.set)

        def close() -> None:
            pending.append(STORAGE_DESTROYED)
            loop.call_soon_threadsafe(wakeup.set)

        def snapshot(objects: list[dict], at: int) -> None:
            revision[0] = at
            for obj in objects:
                pending.append(WatchEvent(int(obj['metadata']['resourceVersion']), 'ADDED', obj, None))
            wakeup.set()

        def queue_bookmark() -> None:
            # A real watch cache sends a bookmark through the watcher's one ordered channel, behind every event
            # dispatched before it (staging/src/k8s.io/apiserver/pkg/storage/cacher/cacher.go, dispatchEvents: the
            # bookmark timer's event goes through dispatchEvent like any other; cache_watcher.go: nonblockingAdd and
            # add put it on the same `input` channel that processInterval drains in order), so a client resuming
            # from its resourceVersion misses nothing. Under the store's lock every event up to the revision read
            # here has been delivered (Store._emit runs under it), so the bookmark queues behind all of them.
            with self.store.lock:
                pending.append(Bookmark(max(revision[0], self.store.revision)))

        try:
            watcher = self.store.subscribe(rtype, params.get('resourceVersion'), deliver, snapshot, close)
        except ApiError as error:
            if error.code != 410:
                raise
            response = await _stream_start(request)
            await response.write(_line({'type': 'ERROR', 'object': error.status()}))
            await response.write_eof()
            return response
        response = await _stream_start(request)
        deadline = time.monotonic() + timeout if timeout else None
        try:
            while True:
                wait = self.bookmark_seconds if deadline is None else min(self.bookmark_seconds, deadline - time.monotonic())
                if wait <= 0:
                    break
                if not pending:
                    wakeup.clear()
                    try:
                        await asyncio.wait_for(wakeup.wait(), wait)
                    except TimeoutError:
                        if bookmarks:
                            queue_bookmark()
                    continue
                event = pending.popleft()
                if event is STORAGE_DESTROYED:
                    break  # the watch cache stopped: the stream closes with no ERROR event (cacher.go, terminateAllWatchers)
                if isinstance(event, Bookmark):
                    await response.write(_line({'type': 'BOOKMARK', 'object': {
                        'kind': rtype.kind, 'apiVersion': rtype.api_version,
                        'metadata': {'resourceVersion': str(event.rv)}}}))
                    continue
                revision[0] = max(revision[0], event.rv)
                now_visible, was_visible = visible(event.obj), visible(event.old)
                if event.type == 'DELETED':
                    kind = 'DELETED' if was_visible or now_visible else None
                elif now_visible:
                    kind = 'MODIFIED' if (was_visible and event.type == 'MODIFIED') else 'ADDED'
                else:
                    kind = 'DELETED' if was_visible else None
                if kind is None:
                    continue
                obj = {**event.obj, 'apiVersion': rtype.api_version}
                if event.type == 'MODIFIED' and kind == 'DELETED':
                    # An object that stops matching the selector leaves as DELETED carrying its PREVIOUS
                    # content at the event's resourceVersion (convertToWatchEvent, staging/src/k8s.io/apiserver/
                    # pkg/storage/cacher/cache_watcher.go): a client filtering on the label still sees it go.
                    old = event.old or {}
                    obj = {**old, 'apiVersion': rtype.api_version,
                           'metadata': {**(old.get('metadata') or {}), 'resourceVersion': str(event.rv)}}
                if as_table:
                    obj = tables.table(rtype, [obj], str(event.rv), params.get('includeObject', 'Metadata'))
                await response.write(_line({'type': kind, 'object': obj}))
        except ConnectionError:
            pass  # the client went away; cancellation (server shutdown, disconnect) propagates as it should
        finally:
            self.store.unsubscribe(watcher)
        with contextlib.suppress(ConnectionError):
            await response.write_eof()
        return response

    # ------------------------------------------------------------ discovery

    def _is_discovery(self, path: str) -> bool:
        parts = [p for p in path.split('/') if p]
        return (parts[:1] == ['api'] and len(parts) == 2) or (parts[:1] == ['apis'] and len(parts) in (2, 3))

    def _discovery(self, path: str, accept: str) -> dict:
        served = self.store.served_types()
        parts = [p for p in path.split('/') if p]
        if path.startswith('/openapi'):
            return openapi.document(served, path)
        if path == '/':
            paths = {'/api', '/api/v1', '/apis', '/healthz', '/livez', '/readyz', '/version', '/openapi/v3'}
            for rtype in served:
                if rtype.group:
                    paths |= {f'/apis/{rtype.group}', f'/apis/{rtype.group}/{rtype.version}'}
            return {'paths': sorted(paths)}
        if path == '/api':
            return {'kind': 'APIVersions', 'versions': ['v1'], 'serverAddressByClientCIDRs': [
                {'clientCIDR': '0.0.0.0/0', 'serverAddress': '127.0.0.1'}]}
        groups = collections.defaultdict(list)
        for rtype in served:
            if rtype.group and rtype.version not in groups[rtype.group]:
                groups[rtype.group].append(rtype.version)
        if path == '/apis':
            return {'kind': 'APIGroupList', 'apiVersion': 'v1', 'groups': [_group(g, v) for g, v in sorted(groups.items())]}
        if parts[0] == 'apis' and len(parts) == 2:
            if parts[1] not in groups:
                raise ApiError(404, 'NotFound', 'the server could not find the requested resource')
            return {'kind': 'APIGroup', 'apiVersion': 'v1', **_group(parts[1], groups[parts[1]])}
        group, version = ('', parts[1]) if parts[0] == 'api' else (parts[1], parts[2])
        listed = [t for t in served if t.group == group and t.version == version]
        if not listed:
            raise ApiError(404, 'NotFound', 'the server could not find the requested resource')
        return {'kind': 'APIResourceList', 'apiVersion': 'v1', 'groupVersion': listed[0].api_version,
                'resources': [r for t in listed for r in _api_resources(t)]}


VERSION = {'major': '1', 'minor': '32', 'gitVersion': 'v1.32.0-kuberl-standin', 'gitCommit': '0' * 40,
           'gitTreeState': 'clean', 'buildDate': '2026-01-01T00:00:00Z', 'goVersion': 'go1.23', 'compiler': 'gc',
           'platform': 'linux/amd64'}
VERBS = ['create', 'delete', 'deletecollection', 'get', 'list', 'patch', 'update', 'watch']


def _group(name: str, versions: list[str]) -> dict:
    listed = [{'groupVersion': f'{name}/{v}', 'version': v} for v in versions]
    return {'name': name, 'versions': listed, 'preferredVersion': listed[0]}


def _api_resources(rtype) -> list[dict]:
    main = {'name': rtype.plural, 'singularName': rtype.singular, 'namespaced': rtype.namespaced, 'kind': rtype.kind,
            'verbs': VERBS, 'shortNames': list(rtype.short_names), 'categories': list(rtype.categories),
            'storageVersionHash': 'standin'}
    if not main['shortNames']:
        del main['shortNames']
    if not main['categories']:
        del main['categories']
    subresources = {
        'status': (rtype.kind, ['get', 'patch', 'update']),
        'eviction': ('Eviction', ['create']), 'binding': ('Binding', ['create']), 'log': ('Pod', ['get']),
        'finalize': (rtype.kind, ['update']),
    }
    result = [main]
    for sub in rtype.subresources:
        kind, verbs = subresources.get(sub, (rtype.kind, ['get']))
        entry = {'name': f'{rtype.plural}/{sub}', 'singularName': '', 'namespaced': rtype.namespaced, 'kind': kind, 'verbs': verbs}
        if sub == 'eviction':
            entry.update(group='policy', version='v1')
        result.append(entry)
    return result


# The options each write decodes from its query, by verb, and the values ValidateDryRun and ValidateFieldValidation
# take (staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/validation/validation.go: allowedDryRunValues,
# allowedFieldValidationValues, listed sorted); DeleteOptions carry no fieldValidation.
_OPTIONS = {'create': 'CreateOptions', 'update': 'UpdateOptions', 'patch': 'PatchOptions', 'delete': 'DeleteOptions'}
_DRY_RUN_VALUES = ('All',)
_FIELD_VALIDATION_VALUES = ('', 'Ignore', 'Strict', 'Warn')


def _check_options(verb: str, params: dict) -> None:
    """A write whose dryRun or fieldValidation the server does not know is refused before anything is read (the
    handlers answer NewInvalid of the options, 422): a client that sent dryRun=true wrote for real here."""
    kind = _OPTIONS.get(verb)
    if kind is None:
        return
    errors = []
    if 'dryRun' in params and params['dryRun'] not in _DRY_RUN_VALUES:  # a []string, printed as Go's %#v prints it
        errors.append(f'dryRun: Unsupported value: []string{{{json.dumps(params["dryRun"])}}}: supported values: "All"')
    if verb != 'delete' and params.get('fieldValidation', '') not in _FIELD_VALIDATION_VALUES:
        supported = ', '.join(json.dumps(v) for v in _FIELD_VALIDATION_VALUES)
        errors.append(f'fieldValidation: Unsupported value: {json.dumps(params["fieldValidation"])}: supported values: {supported}')
    if errors:
        listed = errors[0] if len(errors) == 1 else '[' + ', '.join(errors) + ']'
        raise ApiError(422, 'Invalid', f'{kind}.meta.k8s.io "" is invalid: {listed}', {'group': 'meta.k8s.io', 'kind': kind, 'causes': [
            {'reason': 'FieldValueNotSupported', 'message': e.split(': ', 1)[1], 'field': e.split(':', 1)[0]} for e in errors]})


def _json(body: dict, status: int = 200, warnings: list[str] | None = None) -> aiohttp.web.Response:
    # NewWarningHeader (k8s.io/apimachinery/pkg/util/net/http.go): code 299, agent '-', the text a quoted-string
    headers = {'Warning': ', '.join('299 - "{}"'.format(w.replace('\\', '\\\\').replace('"', '\\"')) for w in warnings)} if warnings else None
    return aiohttp.web.Response(text=json.dumps(body), status=status, content_type='application/json', headers=headers)


def _nesting(body: bytes) -> int:
    """How deep `body`'s JSON nests (objects and arrays), strings left out; counted without recursion."""
    if body.count(b'{') + body.count(b'[') <= MAX_JSON_NESTING:
        return 0  # too few to nest that deep: not worth a scan
    brackets = _JSON_STRING.sub(b'', body).translate(None, _NOT_BRACKETS)
    return max(itertools.accumulate(map(_BRACKET_DEPTH.__getitem__, brackets)), default=0)


async def _json_body(raw_request: aiohttp.web.BaseRequest) -> object:
    try:
        return json.loads(await raw_request.read() or b'null')
    except ValueError:
        return None


def _line(event: dict) -> bytes:
    return json.dumps(event).encode() + b'\n'


def _int64_param(params: dict, name: str) -> int | None:
    """A query parameter the API server decodes into an int64 (ListOptions.Limit, TimeoutSeconds): with
    strconv.ParseInt(s, 10, 64) (apimachinery pkg/runtime/conversion.go, Convert_Slice_string_To_int64), so "300.0",
    " 3", "1_0" and "" are a 400 in ParseInt's words (endpoints/handlers/get.go ListResource:
    errors.NewBadRequest(err.Error())), not numbers as Python's int() reads them. Absent is None."""
    text = params.get(name)
    if text is None:
        return None
    if not re.fullmatch(r'[+-]?[0-9]+', text):
        raise bad_request(f'strconv.ParseInt: parsing {json.dumps(text)}: invalid syntax')
    if not -2**63 <= int(text) < 2**63:
        raise bad_request(f'strconv.ParseInt: parsing {json.dumps(text)}: value out of range')
    return int(text)


def _validate_list_options(version: str, match: str, token: str | None) -> None:
    """ValidateListOptions (apimachinery pkg/apis/meta/internalversion/validation) as ListResource answers it: a 422
    naming ListOptions.meta.k8s.io and each field error."""
    errors = []
    if match:
        if not version:
            errors.append(FieldError('FieldValueForbidden', 'resourceVersionMatch',
                                     'resourceVersionMatch is forbidden unless resourceVersion is provided'))
        if token:
            errors.append(FieldError('FieldValueForbidden', 'resourceVersionMatch',
                                     'resourceVersionMatch is forbidden when continue is provided'))
        if match not in ('Exact', 'NotOlderThan'):
            errors.append(FieldError('FieldValueNotSupported', 'resourceVersionMatch',
                                     'supported values: "Exact", "NotOlderThan", ""', match))
        if match == 'Exact' and version == '0':
            errors.append(FieldError('FieldValueForbidden', 'resourceVersionMatch',
                                     'resourceVersionMatch "exact" is forbidden for resourceVersion "0"'))
    if errors:
        raise invalid_kind('ListOptions.meta.k8s.io', 'meta.k8s.io', 'ListOptions', '', errors)


def _http_date() -> str:
    """The Date header by the stand-in's clock (store.CLOCK_OFFSET), as the API server's answers carry its own."""
    return email.utils.format_datetime(store_now(), usegmt=True)


async def _stream_start(request: kmock.Request) -> aiohttp.web.StreamResponse:
    response = aiohttp.web.StreamResponse(status=200, headers={'Content-Type': 'application/json', 'Date': _http_date(),
                                                               'Transfer-Encoding': 'chunked'})
    await response.prepare(request._raw_request)
    return response


# ---------------------------------------------------------------- running it

class StandinServer:
    """The stand-in on 127.0.0.1 in a background thread with its own event loop.

    Use as a context manager; `url`, `kubeconfig`, `store` (direct access for test hooks) and
    `calls` (the API call log) are available inside. `apply_crd()` installs a CRD from YAML.
    """

    def __init__(self, port: int | None = None, *, default_node: str | None = 'local-node', workdir: pathlib.Path | None = None,
                 unattended_pods_use_grace: bool = False, tokens: set[str] | None = None):
        self.port = port  # None: the listening socket binds port 0, so no other process can race us to it
        self.handler = StandinHandler(store=Store(default_node=default_node, unattended_pods_use_grace=unattended_pods_use_grace),
                                      tokens=tokens)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._workdir = workdir
        self._tempdir: tempfile.TemporaryDirectory | None = None
        self.kubeconfig: pathlib.Path | None = None

    @property
    def url(self) -> str:
        return f'http://127.0.0.1:{self.port}'

    @property
    def store(self) -> Store:
        return self.handler.store

    @property
    def calls(self) -> collections.Counter:
        return self.handler.calls

    def writes(self, agent: str | None = None) -> int:
        """Write requests recorded so far (optionally by one client, the User-Agent's first word)."""
        return sum(n for call, n in self.calls.items() if call.verb in WRITE_VERBS and (agent is None or call.agent == agent))

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        # Python's json decodes and encodes one recursion per level: enough to hold what the API server holds
        sys.setrecursionlimit(max(sys.getrecursionlimit(), MAX_JSON_NESTING + 2_000))
        self._thread = threading.Thread(target=self._run, name='kube-api-standin', daemon=True)
        self._thread.start()
        self._ready.wait(60)  # returns once it serves
        if self._error:
            raise self._error
        if self._workdir is None:
            self._tempdir = tempfile.TemporaryDirectory(prefix='standin-')
            self._workdir = pathlib.Path(self._tempdir.name)
        self.kubeconfig = self._workdir / 'kubeconfig'
        self.kubeconfig.write_text(yaml.safe_dump(kubeconfig(self.url)))

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self.store.schedule = lambda delay, fn: loop.call_soon_threadsafe(loop.call_later, delay, fn)
        try:
            loop.run_until_complete(self._serve())
        except BaseException as error:  # noqa: BLE001 — surfaced to start() in the test thread
            self._error = error
            self._ready.set()
        finally:
            loop.close()

    async def _serve(self) -> None:
        self._stopped = asyncio.Event()
        async with self.handler, kmock.Server(self.handler, port=self.port) as server:
            self.port = server.port
            self._ready.set()
            await self._stopped.wait()

    def stop(self) -> None:
        if self._loop is not None and self._stopped is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._stopped.set)
        if self._thread is not None:
            self._thread.join(10)
        if self._tempdir is not None:
            self._tempdir.cleanup()

    def apply_crd(self, path_or_doc: pathlib.Path | str | dict) -> dict:
        """Install a CRD (a path to its YAML or the document) as kubectl apply would create it."""
        doc = path_or_doc if isinstance(path_or_doc, dict) else copy.deepcopy(parsed_yaml(pathlib.Path(path_or_doc).read_text()))
        crds = self.store.type_of('apiextensions.k8s.io', 'v1', 'customresourcedefinitions')
        return self.store.create(crds, None, doc)[0]


@functools.lru_cache(maxsize=8)
def parsed_yaml(text: str) -> dict:
    """`text` parsed, once per process: every test's stand-in applies the same 75 KB CRD, and pure-Python
    yaml took about 0.2 s of CPU to parse it, each time (callers copy it: the document is shared)."""
    return yaml.safe_load(text)


STANDIN_TOKEN = 'standin'  # the token of the kubeconfig the stand-in writes


def kubeconfig(url: str, namespace: str = 'default', user: dict | None = None) -> dict:
    return {
        'apiVersion': 'v1', 'kind': 'Config', 'current-context': 'standin', 'preferences': {},
        'clusters': [{'name': 'standin', 'cluster': {'server': url}}],
        'users': [{'name': 'standin', 'user': user or {'token': STANDIN_TOKEN}}],
        'contexts': [{'name': 'standin', 'context': {'cluster': 'standin', 'user': 'standin', 'namespace': namespace}}],
    }
