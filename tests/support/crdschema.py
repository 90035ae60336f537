"""A CRD version's structural schema applied like the API server: prune, default, validate, CEL.

Order as in the apiextensions server: unknown fields are pruned (and reported, for
fieldValidation), non-nullable nulls dropped, defaults applied, then the OpenAPI checks
and the x-kubernetes-validations rules (with oldSelf on update) run.

On update both are ratcheted as the API server ratchets them (CRDValidationRatcheting, beta and on by default
since Kubernetes 1.30, GA in 1.33; KEP-4008): an error raised at a value equal to its old value is let through.
Sources: apiextensions-apiserver pkg/apiserver/validation/ratcheting.go (ratchetingValueValidator.Validate: "ratchet
errors if DeepEqual(old, new)", kept as the result's warnings, which validation.go's ValidateCustomResourceUpdate
drops: nothing is said of a ratcheted OpenAPI error), pkg/apiserver/schema/cel/validation.go (validateExpressions: only rules that do not
use oldSelf, `!compiled.UsesOldSelf && correlation.shouldRatchetError()`, and then as a warning; an evaluation error
never), apiserver pkg/cel/common/equality.go (correlateOldValueForChildAtNewIndex: an object's fields correlate by
key, a list's items only in a listType map, by its keys; an item that does not correlate is judged by its nearest
ancestor that does).
"""
import copy
import functools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import celpy
from celpy import celtypes


@dataclass(frozen=True)
class FieldError:
    """One entry of a 422's status.details.causes, rendered like Go's field.Error."""
    reason: str
    field: str
    detail: str = ''
    value: object = None
    shown: bool = True  # whether `Invalid value: <v>` precedes the detail

    @property
    def message(self) -> str:
        match self.reason:
            case 'FieldValueRequired':
                return 'Required value' + (f': {self.detail}' if self.detail else '')
            case 'FieldValueNotSupported':
                return f'Unsupported value: {go_repr(self.value)}: {self.detail}'
            case 'FieldValueTooLong':
                return f'Too long: {self.detail}'
            case 'FieldValueTooMany':
                return f'Too many: {go_repr(self.value)}: {self.detail}'
            case 'FieldValueForbidden':
                return f'Forbidden: {self.detail}'
            case 'FieldValueDuplicate':
                return f'Duplicate value: {go_repr(self.value)}'
            case _:
                return f'Invalid value: {go_repr(self.value)}: {self.detail}'

    def __str__(self) -> str:
        return f'{self.field}: {self.message}'

    def cause(self) -> dict:
        return {'reason': self.reason, 'message': self.message, 'field': self.field}


def go_repr(value: object) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return 'true' if value else 'false'
    if value is None:
        return 'null'
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(',', ':'))
    return str(value)


def type_name(value: object) -> str:
    if isinstance(value, bool):
        return 'boolean'
    if isinstance(value, int):
        return 'integer'
    if isinstance(value, float):
        return 'number'
    if isinstance(value, str):
        return 'string'
    if isinstance(value, list):
        return 'array'
    if isinstance(value, dict):
        return 'object'
    return 'null'


def schema_nodes(schema: dict, path: str = ''):
    """Every node of a schema with its path: properties by name, list items as [], map values as {}."""
    yield path, schema
    for name, child in (schema.get('properties') or {}).items():
        yield from schema_nodes(child, f'{path}.{name}')
    if isinstance(schema.get('items'), dict):
        yield from schema_nodes(schema['items'], f'{path}[]')
    if isinstance(schema.get('additionalProperties'), dict):
        yield from schema_nodes(schema['additionalProperties'], f'{path}{{}}')


def _join(path: str, key: str) -> str:
    return f'{path}.{key}' if path else key


# ---------------------------------------------------------------- pruning and defaulting

def prune(value: object, schema: dict, path: str = '', unknown: list[str] | None = None) -> list[str]:
    """Drop fields the schema does not declare, in place; return their paths (for fieldValidation)."""
    unknown = [] if unknown is None else unknown
    if isinstance(value, dict) and schema.get('type', 'object') == 'object':
        properties = schema.get('properties')
        additional = schema.get('additionalProperties')
        preserve = schema.get('x-kubernetes-preserve-unknown-fields', False)
        for key in list(value):
            if properties is not None and key in properties:
                prune(value[key], properties[key], _join(path, key), unknown)
            elif isinstance(additional, dict):
                prune(value[key], additional, _join(path, key), unknown)
            elif not preserve and additional is not True and not schema.get('x-kubernetes-embedded-resource'):
                unknown.append(_join(path, key))
                del value[key]
    elif isinstance(value, list) and isinstance(schema.get('items'), dict):
        for index, item in enumerate(value):
            prune(item, schema['items'], f'{path}[{index}]', unknown)
    return unknown


def default(value: object, schema: dict) -> None:
    """Apply `default`s in place to absent fields of present objects, and drop non-nullable nulls."""
    if isinstance(value, dict):
        properties = schema.get('properties') or {}
        for key, subschema in properties.items():
            if key in value and value[key] is None and not subschema.get('nullable'):
                del value[key]
            if key not in value and 'default' in subschema:
                value[key] = copy.deepcopy(subschema['default'])
            if key in value:
                default(value[key], subschema)
        additional = schema.get('additionalProperties')
        if isinstance(additional, dict):
            for key in value:
                if key not in properties:
                    default(value[key], additional)
    elif isinstance(value, list) and isinstance(schema.get('items'), dict):
        for item in value:
            default(item, schema['items'])


# ---------------------------------------------------------------- OpenAPI checks

_MISSING = object()  # no old value correlates: a create, a field the old object lacked, an atomic list's item


def deep_equal(new: object, old: object) -> bool:
    """reflect.DeepEqual over decoded JSON, as CorrelatedObject.CachedDeepEqual compares: 1 and 1.0, or true and 1,
    differ (int64, float64 and bool in Go). Iterative: a preserve-unknown value may nest thousands deep."""
    pending = [(new, old)]
    while pending:
        a, b = pending.pop()
        if type(a) is not type(b):
            return False
        if isinstance(a, dict):
            if a.keys() != b.keys():
                return False
            pending.extend((a[key], b[key]) for key in a)
        elif isinstance(a, list):
            if len(a) != len(b):
                return False
            pending.extend(zip(a, b, strict=True))
        elif a != b:
            return False
    return True


Ratchets = Callable[[], bool]  # whether an error raised at this value is let through (computed only on an error)


def _never() -> bool:
    return False


def _ratchets(new: object, old: object, inherited: Ratchets) -> Ratchets:
    """A correlated value ratchets when it equals its old value; one that does not correlate, as its nearest
    correlated ancestor does (ratchetingOptions.shouldRatchetError)."""
    if old is _MISSING:
        return inherited
    return functools.cache(lambda: deep_equal(new, old))


def _old_items(value: list, old: object, schema: dict) -> list:
    """Each item's correlated old item: by x-kubernetes-list-map-keys in a listType map, else none."""
    if not isinstance(old, list) or schema.get('x-kubernetes-list-type') != 'map':
        return [_MISSING] * len(value)
    keys = schema.get('x-kubernetes-list-map-keys') or []
    by_key = {tuple(json.dumps(item.get(k), sort_keys=True) for k in keys): item for item in old if isinstance(item, dict)}
    return [by_key.get(tuple(json.dumps(item.get(k), sort_keys=True) for k in keys), _MISSING) if isinstance(item, dict)
            else _MISSING for item in value]


_TYPE_CHECKS = {
    'object': lambda v: isinstance(v, dict),
    'array': lambda v: isinstance(v, list),
    'string': lambda v: isinstance(v, str),
    'integer': lambda v: isinstance(v, int) and not isinstance(v, bool),
    'number': lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    'boolean': lambda v: isinstance(v, bool),
}


def validate(value: object, schema: dict, path: str, errors: list[FieldError], old: object = _MISSING,
             ratchets: Ratchets | None = None) -> None:
    """The OpenAPI checks of `value` at `path`; on update (`old`, the correlated old value) an error raised at a value
    that `ratchets` is dropped. `ratchets` defaults to this value's own correlation (a nested call's, the caller's)."""
    ratchets = ratchets if ratchets is not None else _ratchets(value, old, _never)
    found: list[FieldError] = []
    _validate_value(value, schema, path, found, old, ratchets)
    if found and not ratchets():
        errors.extend(found)


def _validate_value(value: object, schema: dict, path: str, errors: list[FieldError], old: object,
                    ratchets: Ratchets) -> None:
    if value is None:
        if not schema.get('nullable'):
            errors.append(FieldError('FieldValueInvalid', path, f'{path} in body must be of type {schema.get("type", "object")}: "null"', 'null'))
        return
    if schema.get('x-kubernetes-int-or-string'):
        if not (isinstance(value, str) or _TYPE_CHECKS['integer'](value)):
            errors.append(FieldError('FieldValueInvalid', path, f'{path} in body must be of type integer,string: "{type_name(value)}"', type_name(value)))
        return
    expected = schema.get('type')
    if expected and not _TYPE_CHECKS[expected](value):
        errors.append(FieldError('FieldValueInvalid', path, f'{path} in body must be of type {expected}: "{type_name(value)}"', type_name(value)))
        return
    if 'enum' in schema and value not in schema['enum']:
        supported = ', '.join(go_repr(choice) for choice in schema['enum'])
        errors.append(FieldError('FieldValueNotSupported', path, f'supported values: {supported}', value))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        _check_bounds(value, schema, path, errors)
    if isinstance(value, str):
        if 'maxLength' in schema and len(value) > schema['maxLength']:
            errors.append(FieldError('FieldValueTooLong', path, f'may not be more than {schema["maxLength"]} bytes', value))
        if 'minLength' in schema and len(value) < schema['minLength']:
            errors.append(FieldError('FieldValueInvalid', path, f'{path} in body should be at least {schema["minLength"]} chars long', value))
        if 'pattern' in schema and not go_pattern(schema['pattern']).search(value):
            errors.append(FieldError('FieldValueInvalid', path, f"{path} in body should match '{schema['pattern']}'", value))
    if isinstance(value, list):
        if 'maxItems' in schema and len(value) > schema['maxItems']:
            errors.append(FieldError('FieldValueTooMany', path, f'must have at most {schema["maxItems"]} items', len(value)))
        if 'minItems' in schema and len(value) < schema['minItems']:
            errors.append(FieldError('FieldValueInvalid', path, f'{path} in body should have at least {schema["minItems"]} items', len(value)))
        if isinstance(schema.get('items'), dict):
            for index, (item, old_item) in enumerate(zip(value, _old_items(value, old, schema), strict=True)):
                validate(item, schema['items'], f'{path}[{index}]', errors, old_item, _ratchets(item, old_item, ratchets))
    if isinstance(value, dict):
        if 'maxProperties' in schema and len(value) > schema['maxProperties']:
            errors.append(FieldError('FieldValueTooMany', path, f'must have at most {schema["maxProperties"]} items', len(value)))
        for key in schema.get('required', []):
            if key not in value:
                errors.append(FieldError('FieldValueRequired', _join(path, key)))
        properties = schema.get('properties') or {}
        additional = schema.get('additionalProperties')
        for key, item in value.items():
            subschema = properties.get(key, additional if isinstance(additional, dict) else None)
            if subschema is not None:
                old_item = old.get(key, _MISSING) if isinstance(old, dict) else _MISSING
                validate(item, subschema, _join(path, key), errors, old_item, _ratchets(item, old_item, ratchets))


@functools.cache
def go_pattern(pattern: str) -> re.Pattern:
    """`pattern` compiled to match as Go's regexp does, which the API server checks a schema's pattern with
    (kube-openapi pkg/validation/validate/values.go Pattern: regexp.MatchString): a `$` outside a class is the end of
    the text only (RE2 syntax: "at end of text (like \\z not \\Z)"), where Python's also matches before a final
    newline, so a value ending in one passed here and was refused there."""
    out, i, in_class = [], 0, False
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
            lead = 2 if pattern.startswith("^]", i + 1) else 1 if pattern.startswith("]", i + 1) else 0
            out.append(pattern[i:i + 1 + lead])  # a `]` first in a class is itself
            i += 1 + lead
            continue
        elif char == "$":
            char = r"\Z"
        out.append(char)
        i += 1
    return re.compile("".join(out))


def _check_bounds(value: float, schema: dict, path: str, errors: list[FieldError]) -> None:
    if 'minimum' in schema:
        low = schema['minimum']
        if schema.get('exclusiveMinimum') and value <= low:
            errors.append(FieldError('FieldValueInvalid', path, f'{path} in body should be greater than {low}', value))
        elif value < low:
            errors.append(FieldError('FieldValueInvalid', path, f'{path} in body should be greater than or equal to {low}', value))
    if 'maximum' in schema:
        high = schema['maximum']
        if schema.get('exclusiveMaximum') and value >= high:
            errors.append(FieldError('FieldValueInvalid', path, f'{path} in body should be less than {high}', value))
        elif value > high:
            errors.append(FieldError('FieldValueInvalid', path, f'{path} in body should be less than or equal to {high}', value))


# ---------------------------------------------------------------- CEL (x-kubernetes-validations)

_CEL = celpy.Environment()


@lru_cache(maxsize=512)
def _program(expression: str) -> celpy.Runner:
    return _CEL.program(_CEL.compile(expression))


@lru_cache(maxsize=512)
def compile_rule(expression: str) -> None:
    """Compile a CEL expression (raises on a syntax error, which lru_cache does not keep). Cached: each test's
    stand-in checks the same CRD's 75 rules, about 0.15 s of lark's parsing, each time."""
    _CEL.compile(expression)


def clone_json(value: object) -> object:
    return json.loads(json.dumps(value))


def unknown_type(schema: dict) -> bool:
    """A schema of "unknown type", as ValidationRule.Rule's doc defines it (apiextensions/v1 types_jsonschema.go):
    no type and x-kubernetes-preserve-unknown-fields, or an array or map of such."""
    if not schema.get('type'):
        return bool(schema.get('x-kubernetes-preserve-unknown-fields'))
    items, additional = schema.get('items'), schema.get('additionalProperties')
    return (schema['type'] == 'array' and isinstance(items, dict) and unknown_type(items)) or (
        schema['type'] == 'object' and isinstance(additional, dict) and unknown_type(additional))


def to_cel(value: object, schema: dict) -> object:
    """JSON → CEL values typed by the schema (a `number` is a double even when written as 1). What
    x-kubernetes-preserve-unknown-fields keeps (undeclared fields, values of unknown_type) is left out:
    "Unknown data preserved in custom resources via x-kubernetes-preserve-unknown-fields is not accessible
    in CEL expressions" (ValidationRule.Rule's doc). Converted, a kwargs nested 9,000 deep, which the API
    server stores, ended the stand-in's CEL in a RecursionError."""
    if value is None:
        return None
    kind = schema.get('type')
    if kind == 'number':
        return celtypes.DoubleType(float(value))
    if kind == 'object' and isinstance(value, dict):
        properties = schema.get('properties') or {}
        additional = schema.get('additionalProperties') if isinstance(schema.get('additionalProperties'), dict) else None
        declared = {k: properties.get(k, additional) for k, v in value.items() if v is not None}
        return celtypes.MapType({
            celtypes.StringType(k): to_cel(value[k], sub) for k, sub in declared.items() if sub is not None and not unknown_type(sub)
        })
    if kind == 'array' and isinstance(value, list):
        return celtypes.ListType([to_cel(item, schema.get('items') or {}) for item in value])
    return celpy.json_to_cel(value)


def check_rules(value: object, old: object, schema: dict, path: str, errors: list[FieldError],
                warnings: list[str] | None = None, ratchets: Ratchets | None = None) -> None:
    """Run every x-kubernetes-validations rule where its value exists; transition rules only with an old value.
    A rule without oldSelf that fails at a value that `ratchets` (by default: equal to its correlated `old`) is a
    warning, not an error."""
    if value is None:
        return
    ratchets = ratchets if ratchets is not None else _ratchets(value, old, _never)
    for rule in schema.get('x-kubernetes-validations', []):
        expression = rule['rule']
        transition = 'oldSelf' in expression
        if transition and (old is _MISSING or old is None):
            continue
        activation = {'self': to_cel(value, schema)}
        if transition:
            activation['oldSelf'] = to_cel(old, schema)
        field = path + rule.get('fieldPath', '') if rule.get('fieldPath') else path
        try:
            passed = bool(_program(expression).evaluate(activation))
        except (celpy.CELEvalError, TypeError, KeyError, ValueError) as error:
            errors.append(FieldError('FieldValueInvalid', field, f'evaluation error: {error.args[0] if error.args else error}', type_name(value)))
            continue
        if not passed:
            error = FieldError(rule.get('reason', 'FieldValueInvalid'), field, _rule_message(rule, activation), type_name(value))
            if transition or not ratchets():
                errors.append(error)
            elif warnings is not None:
                warnings.append(str(error))
    if isinstance(value, dict):
        properties = schema.get('properties') or {}
        additional = schema.get('additionalProperties') if isinstance(schema.get('additionalProperties'), dict) else None
        for key, item in value.items():
            subschema = properties.get(key, additional)
            if subschema is not None:
                old_item = old.get(key, _MISSING) if isinstance(old, dict) else _MISSING
                check_rules(item, old_item, subschema, _join(path, key), errors, warnings, _ratchets(item, old_item, ratchets))
    elif isinstance(value, list) and isinstance(schema.get('items'), dict):
        for index, (item, old_item) in enumerate(zip(value, _old_items(value, old, schema), strict=True)):
            check_rules(item, old_item, schema['items'], f'{path}[{index}]', errors, warnings, _ratchets(item, old_item, ratchets))


def _rule_message(rule: dict, activation: dict) -> str:
    if rule.get('messageExpression'):
        try:
            return str(_program(rule['messageExpression']).evaluate(activation))
        except (celpy.CELEvalError, TypeError):
            pass
    return rule.get('message') or f'failed rule: {rule["rule"]}'


# ---------------------------------------------------------------- one CRD version

@dataclass
class CustomSchema:
    """The openAPIV3Schema of one served CRD version."""
    schema: dict

    def prepare(self, obj: dict) -> list[str]:
        """Prune and default a decoded object in place; return the unknown fields' paths."""
        body = {k: v for k, v in obj.items() if k not in ('apiVersion', 'kind', 'metadata')}
        unknown = prune(body, self.schema)
        default(body, self.schema)
        for key in [k for k in obj if k not in ('apiVersion', 'kind', 'metadata')]:
            del obj[key]
        obj.update(body)
        return unknown

    def default_stored(self, obj: dict) -> None:
        """Apply today's defaults to a stored object in place (its metadata aside), as reading it back does."""
        body = {k: v for k, v in obj.items() if k not in ('apiVersion', 'kind', 'metadata')}
        default(body, self.schema)
        for key in [k for k in obj if k not in ('apiVersion', 'kind', 'metadata')]:
            del obj[key]
        obj.update(body)

    def validate(self, obj: dict, old: dict | None, warnings: list[str] | None = None) -> list[FieldError]:
        """The object's errors; on update (`old`) those ratcheted are left out, a CEL rule's said in `warnings`."""
        errors: list[FieldError] = []
        body = {k: v for k, v in obj.items() if k not in ('apiVersion', 'kind', 'metadata')}
        schema = {**self.schema, 'properties': {k: v for k, v in (self.schema.get('properties') or {}).items() if k != 'metadata'}}
        old_body = {k: v for k, v in old.items() if k not in ('apiVersion', 'kind', 'metadata')} if old else _MISSING
        # the root correlates with the whole old object, metadata included: a label's edit is a change there
        root = _ratchets(obj, old, _never) if old else _never
        validate(body, schema, '', errors, old_body, root)
        name_schema = ((self.schema.get('properties') or {}).get('metadata') or {}).get('properties', {}).get('name')
        name = (obj.get('metadata') or {}).get('name')
        if name_schema and name is not None:
            validate(name, name_schema, 'metadata.name', errors)
        check_rules(body, old_body, schema, '', errors, warnings, root)
        return errors
