"""Server-side Table rendering (`Accept: application/json;as=Table;g=meta.k8s.io;v=v1`), as kubectl get asks."""
import re

from tests.support.resources import ResourceType
from tests.support.store import now, parse_time


def human_duration(since: str | None) -> str:
    """Kubernetes' duration.HumanDuration of the time since a timestamp."""
    if not since:
        return '<unknown>'
    try:
        seconds = int((now() - parse_time(since)).total_seconds())
    except ValueError:
        return '<invalid>'
    seconds = max(seconds, 0)
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if seconds < 120:
        return f'{seconds}s'
    if minutes < 10:
        return f'{minutes}m{seconds % 60}s' if seconds % 60 else f'{minutes}m'
    if minutes < 180:
        return f'{minutes}m'
    if hours < 8:
        return f'{hours}h{minutes % 60}m' if minutes % 60 else f'{hours}h'
    if hours < 48:
        return f'{hours}h'
    if hours < 24 * 8:
        return f'{days}d{hours % 24}h' if hours % 24 else f'{days}d'
    return f'{days}d'


def json_path(obj: dict, path: str) -> object:
    """The simple JSONPath CRD printer columns allow: `.a.b`, `.a[0].b`, `.a['x.y']`."""
    value: object = obj
    for token in re.findall(r"\.([A-Za-z0-9_-]+)|\[(\d+)\]|\['([^']+)'\]", path):
        key, index, quoted = token
        if index:
            value = value[int(index)] if isinstance(value, list) and int(index) < len(value) else None
        else:
            value = value.get(key or quoted) if isinstance(value, dict) else None
        if value is None:
            return None
    return value


def _custom_cell(column: dict, value: object) -> object:
    if value is None:
        return None
    match column.get('type'):
        case 'date':
            return human_duration(value) if isinstance(value, str) else '<invalid>'
        case 'integer':
            return value if isinstance(value, int) else None
        case 'number':
            return value if isinstance(value, (int, float)) else None
        case 'boolean':
            return value if isinstance(value, bool) else None
        case _:
            return value if isinstance(value, str) else str(value)


def _pod_columns(pod: dict) -> list:
    status = pod.get('status') or {}
    statuses = status.get('containerStatuses') or []
    containers = (pod.get('spec') or {}).get('containers') or []
    ready = sum(1 for s in statuses if s.get('ready'))
    reason = status.get('reason') or status.get('phase') or 'Unknown'
    for container in statuses:
        state = container.get('state') or {}
        if state.get('waiting', {}).get('reason'):
            reason = state['waiting']['reason']
        elif state.get('terminated', {}).get('reason'):
            reason = state['terminated']['reason']
    if pod['metadata'].get('deletionTimestamp'):
        reason = 'Terminating'
    restarts = sum(s.get('restartCount', 0) for s in statuses)
    return [f'{ready}/{len(containers)}', reason, restarts, human_duration(pod['metadata'].get('creationTimestamp')),
            status.get('podIP') or '<none>', (pod.get('spec') or {}).get('nodeName') or '<none>', '<none>', '<none>']


_POD_DEFINITIONS = [('Ready', 'string', 0), ('Status', 'string', 0), ('Restarts', 'string', 0), ('Age', 'string', 0),
                    ('IP', 'string', 1), ('Node', 'string', 1), ('Nominated Node', 'string', 1), ('Readiness Gates', 'string', 1)]


def _definition(name: str, kind: str, priority: int = 0, description: str = '', fmt: str = '') -> dict:
    return {'name': name, 'type': kind, 'format': fmt, 'description': description, 'priority': priority}


def column_definitions(rtype: ResourceType) -> list[dict]:
    name = _definition('Name', 'string', 0, 'Name must be unique within a namespace.', 'name')
    if rtype.custom and rtype.printer_columns:
        return [name] + [_definition(c['name'], c.get('type', 'string'), c.get('priority', 0), c.get('description', ''),
                                     c.get('format', '')) for c in rtype.printer_columns]
    if rtype.plural == 'pods':
        return [name] + [_definition(n, t, p) for n, t, p in _POD_DEFINITIONS]
    return [name, _definition('Age', 'date', 0, 'CreationTimestamp is a timestamp representing the server time when this object was created.')]


def cells(rtype: ResourceType, obj: dict) -> list:
    name = obj['metadata']['name']
    if rtype.custom and rtype.printer_columns:
        return [name] + [_custom_cell(c, json_path(obj, c['jsonPath'])) for c in rtype.printer_columns]
    if rtype.plural == 'pods':
        return [name] + _pod_columns(obj)
    return [name, human_duration(obj['metadata'].get('creationTimestamp'))]


def _row_object(obj: dict, include: str) -> dict | None:
    if include == 'None':
        return None
    if include == 'Object':
        return obj
    return {'kind': 'PartialObjectMetadata', 'apiVersion': 'meta.k8s.io/v1', 'metadata': obj['metadata']}


def table(rtype: ResourceType, objects: list[dict], resource_version: str, include: str = 'Metadata',
          definitions: bool = True) -> dict:
    return {
        'kind': 'Table', 'apiVersion': 'meta.k8s.io/v1',
        'metadata': {'resourceVersion': resource_version},
        'columnDefinitions': column_definitions(rtype) if definitions else None,
        'rows': [{'cells': cells(rtype, obj), 'object': _row_object(obj, include)} for obj in objects],
    }


def wants_table(accept: str) -> bool:
    first = accept.split(',')[0] if accept else ''
    return 'as=Table' in first


