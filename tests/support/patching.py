"""The three PATCH flavours of the API server: JSON merge, JSON patch, strategic merge."""
import json


def _clone(value: object) -> object:
    """A deep copy of JSON by one recursion per level (copy.deepcopy takes two), so a job nested as deep as the API
    server stores (apiserver.MAX_JSON_NESTING) is patched as it is there."""
    return json.loads(json.dumps(value))


class PatchError(ValueError):
    """A patch the API server would refuse (422 for a failed JSON-patch op, 400 for a malformed one)."""


def merge_patch(target: object, patch: object) -> object:
    """RFC 7386: objects merge recursively, null deletes, everything else replaces."""
    if not isinstance(patch, dict):
        return _clone(patch)
    result = _clone(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if path == '':
        return []
    if not path.startswith('/'):
        raise PatchError(f'invalid JSON pointer: {path!r}')
    return [token.replace('~1', '/').replace('~0', '~') for token in path[1:].split('/')]


def _parent(doc: object, tokens: list[str]) -> tuple[object, str]:
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            raise PatchError(f'path not found: /{"/".join(tokens)}')
    return node, tokens[-1]


def _get(doc: object, tokens: list[str]) -> object:
    if not tokens:
        return doc
    parent, last = _parent(doc, tokens)
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent[int(last)]
    raise PatchError(f'path not found: /{"/".join(tokens)}')


def _remove(doc: object, tokens: list[str]) -> object:
    parent, last = _parent(doc, tokens)
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent.pop(int(last))
    raise PatchError(f'unable to remove nonexistent key: /{"/".join(tokens)}')


def _add(doc: object, tokens: list[str], value: object) -> object:
    if not tokens:
        return value
    parent, last = _parent(doc, tokens)
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == '-':
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent):
            parent.insert(int(last), value)
        else:
            raise PatchError(f'index out of range: /{"/".join(tokens)}')
    else:
        raise PatchError(f'cannot add to a scalar at /{"/".join(tokens)}')
    return doc


def json_patch(target: object, operations: object) -> object:
    """RFC 6902; a failed `test` is a conflict of intent, refused like the API server does."""
    if not isinstance(operations, list):
        raise PatchError('a JSON patch must be a list of operations')
    doc = _clone(target)
    for operation in operations:
        op, tokens = operation.get('op'), _pointer(operation.get('path', ''))
        match op:
            case 'add':
                doc = _add(doc, tokens, _clone(operation['value']))
            case 'remove':
                _remove(doc, tokens)
            case 'replace':
                _get(doc, tokens)
                if tokens:
                    _remove(doc, tokens)
                doc = _add(doc, tokens, _clone(operation['value']))
            case 'move':
                value = _remove(doc, _pointer(operation['from']))
                doc = _add(doc, tokens, value)
            case 'copy':
                doc = _add(doc, tokens, _clone(_get(doc, _pointer(operation['from']))))
            case 'test':
                if json.dumps(_get(doc, tokens), sort_keys=True) != json.dumps(operation.get('value'), sort_keys=True):
                    raise PatchError(f'testing value /{"/".join(tokens)} failed')
            case _:
                raise PatchError(f'unexpected JSON patch operation: {op!r}')
    return doc


# Lists that Kubernetes' Go types tag `patchStrategy:"merge"`, keyed by field name (names are unambiguous
# in the kinds served here, except `ports`: container ports merge on containerPort, service ports on port).
MERGE_KEYS = {
    'containers': 'name', 'initContainers': 'name', 'ephemeralContainers': 'name',
    'env': 'name', 'volumeMounts': 'mountPath', 'volumeDevices': 'devicePath', 'volumes': 'name',
    'imagePullSecrets': 'name', 'conditions': 'type', 'hostAliases': 'ip', 'ownerReferences': 'uid',
    'containerStatuses': 'name', 'initContainerStatuses': 'name', 'resourceClaims': 'name',
    'topologySpreadConstraints': 'topologyKey', 'readinessGates': 'conditionType',
}
MERGED_PRIMITIVE_LISTS = {'finalizers'}


def _merge_key(field: str, items: list) -> str | None:
    if field == 'ports':
        return 'containerPort' if any('containerPort' in item for item in items if isinstance(item, dict)) else 'port'
    return MERGE_KEYS.get(field)


def strategic_merge(target: object, patch: object) -> object:
    """Strategic merge patch for the built-in kinds: keyed lists merge, `$patch` directives obeyed."""
    if not isinstance(patch, dict):
        return _clone(patch)
    patch = dict(patch)
    directive = patch.pop('$patch', None)
    if directive == 'replace':
        return {k: v for k, v in _clone(patch).items() if not k.startswith('$')}
    if directive == 'delete':
        return None
    result = _clone(target) if isinstance(target, dict) else {}
    retain = patch.pop('$retainKeys', None)
    for key, value in patch.items():
        if key.startswith('$setElementOrder/'):
            continue
        if key.startswith('$deleteFromPrimitiveList/'):
            field = key.split('/', 1)[1]
            result[field] = [item for item in result.get(field, []) if item not in value]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            merged = strategic_merge(result.get(key), value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list):
            result[key] = _merge_list(key, result.get(key), value)
        else:
            result[key] = value
    if retain is not None:
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _merge_list(field: str, current: object, patch: list) -> list:
    current = current if isinstance(current, list) else []
    if field in MERGED_PRIMITIVE_LISTS:
        return list(current) + [item for item in patch if item not in current]
    merge_key = _merge_key(field, patch + current)
    if merge_key is None or not all(isinstance(item, dict) for item in patch):
        if any(isinstance(item, dict) and item.get('$patch') == 'replace' for item in patch):
            return [item for item in patch if not (isinstance(item, dict) and '$patch' in item)]
        return _clone(patch)
    result = _clone(current)
    for item in patch:
        if item.get('$patch') == 'replace':
            return [i for i in _clone(patch) if i.get('$patch') != 'replace']
        index = next((i for i, old in enumerate(result) if old.get(merge_key) == item.get(merge_key)), None)
        if item.get('$patch') == 'delete':
            if index is not None:
                result.pop(index)
        elif index is None:
            result.append(strategic_merge({}, item))
        else:
            result[index] = strategic_merge(result[index], item)
    return result
