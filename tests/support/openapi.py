"""Just enough OpenAPI v3 for kubectl: each write path declares `fieldValidation`, so kubectl's
default `--validate=strict` hands validation to the server (Strict field validation, done by Store)."""
from tests.support.resources import ResourceType
from tests.support.store import ApiError

_QUERY = ('dryRun', 'fieldManager', 'fieldValidation', 'pretty')


def _operation(rtype: ResourceType, action: str) -> dict:
    return {
        'operationId': f'{action}{rtype.kind}',
        'x-kubernetes-action': action,
        'x-kubernetes-group-version-kind': {'group': rtype.group, 'version': rtype.version, 'kind': rtype.kind},
        'parameters': [{'name': name, 'in': 'query', 'schema': {'type': 'string', 'uniqueItems': True}} for name in _QUERY],
        'responses': {'200': {'description': 'OK'}},
    }


def _prefix(rtype: ResourceType) -> str:
    return f'/apis/{rtype.group}/{rtype.version}' if rtype.group else f'/api/{rtype.version}'


def _component_name(rtype: ResourceType) -> str:
    return '.'.join(reversed(rtype.group.split('.'))) + f'.{rtype.version}.{rtype.kind}'


def group_document(types: list[ResourceType]) -> dict:
    """Paths for every type; component schemas for custom types (what `kubectl explain` reads)."""
    paths, schemas = {}, {}
    for rtype in types:
        scope = '/namespaces/{namespace}' if rtype.namespaced else ''
        collection = f'{_prefix(rtype)}{scope}/{rtype.plural}'
        paths[collection] = {'post': _operation(rtype, 'post')}
        paths[f'{collection}/{{name}}'] = {'put': _operation(rtype, 'put'), 'patch': _operation(rtype, 'patch')}
        if rtype.has_status:
            paths[f'{collection}/{{name}}/status'] = {'put': _operation(rtype, 'put'), 'patch': _operation(rtype, 'patch')}
        if rtype.schema is not None:
            gvk = {'group': rtype.group, 'version': rtype.version, 'kind': rtype.kind}
            schemas[_component_name(rtype)] = {**rtype.schema.schema, 'x-kubernetes-group-version-kind': [gvk]}
    return {'openapi': '3.0.0', 'info': {'title': 'Kubernetes', 'version': 'v1.32.0'}, 'paths': paths,
            'components': {'schemas': schemas}}


def document(served: list[ResourceType], path: str) -> dict:
    versions = {}
    for rtype in served:
        versions.setdefault(_prefix(rtype).lstrip('/'), []).append(rtype)
    if path.rstrip('/') == '/openapi/v3':
        return {'paths': {key: {'serverRelativeURL': f'/openapi/v3/{key}?hash={len(types)}'} for key, types in versions.items()}}
    if path.startswith('/openapi/v3/'):
        key = path[len('/openapi/v3/'):].strip('/')
        if key in versions:
            return group_document(versions[key])
    raise ApiError(404, 'NotFound', 'the server could not find the requested resource')
