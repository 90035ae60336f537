"""A CRD version's structural schema applied like the API server: prune, default, validate, CEL.

Order as in the apiextensions server: unknown fields are pruned (and reported, for
fieldValidation), non-nullable nulls dropped, defaults applied, then the OpenAPI checks
and the x-kubernetes-validations rules (with oldSelf on update) run.
"""
import copy
import json
import re
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

_TYPE_CHECKS = {
    'object': lambda v: isinstance(v, dict),
    'array': lambda v: isinstance(v, list),
    'string': lambda v: isinstance(v, str),
    'integer': lambda v: isinstance(v, int) and not isinstance(v, bool),
    'number': lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    'boolean': lambda v: isinstance(v, bool),
}


def validate(value: object, schema: dict, path: str, errors: list[FieldError]) -> None:
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
        if 'pattern' in schema and not re.search(schema['pattern'], value):
            errors.append(FieldError('FieldValueInvalid', path, f"{path} in body should match '{schema['pattern']}'", value))
    if isinstance(value, list):
        if 'maxItems' in schema and len(value) > schema['maxItems']:
            errors.append(FieldError('FieldValueTooMany', path, f'must have at most {schema["maxItems"]} items', len(value)))
        if 'minItems' in schema and len(value) < schema['minItems']:
            errors.append(FieldError('FieldValueInvalid', path, f'{path} in body should have at least {schema["minItems"]} items', len(value)))
        if isinstance(schema.get('items'), dict):
            for index, item in enumerate(value):
                validate(item, schema['items'], f'{path}[{index}]', errors)
    if isinstance(value, dict):
        if 'maxProperties' in schema and len(value) > schema['maxProperties']:
            errors.append(FieldError('FieldValueTooMany', path, f'must have at most {schema["maxProperties"]} items', len(value)))
        for key in schema.get('required', []):
            if key not in value:
                errors.append(FieldError('FieldValueRequired', _join(path, key)))
        properties = schema.get('properties') or {}
        additional = schema.get('additionalProperties')
        for key, item in value.items():
            if key in properties:
                validate(item, properties[key], _join(path, key), errors)
            elif isinstance(additional, dict):
                validate(item, additional, _join(path, key), errors)


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


def compile_rule(expression: str) -> None:
    """Compile a CEL expression (raises on a syntax error)."""
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


_MISSING = object()


def check_rules(value: object, old: object, schema: dict, path: str, errors: list[FieldError]) -> None:
    """Run every x-kubernetes-validations rule where its value exists; transition rules only with an old value."""
    if value is None:
        return
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
            errors.append(FieldError(rule.get('reason', 'FieldValueInvalid'), field, _rule_message(rule, activation), type_name(value)))
    if isinstance(value, dict):
        properties = schema.get('properties') or {}
        additional = schema.get('additionalProperties') if isinstance(schema.get('additionalProperties'), dict) else None
        for key, item in value.items():
            subschema = properties.get(key, additional)
            if subschema is not None:
                old_item = old.get(key, _MISSING) if isinstance(old, dict) else _MISSING
                check_rules(item, old_item, subschema, _join(path, key), errors)
    elif isinstance(value, list) and isinstance(schema.get('items'), dict):
        for index, item in enumerate(value):
            check_rules(item, _MISSING, schema['items'], f'{path}[{index}]', errors)


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

    def validate(self, obj: dict, old: dict | None) -> list[FieldError]:
        errors: list[FieldError] = []
        body = {k: v for k, v in obj.items() if k not in ('apiVersion', 'kind', 'metadata')}
        schema = {**self.schema, 'properties': {k: v for k, v in (self.schema.get('properties') or {}).items() if k != 'metadata'}}
        validate(body, schema, '', errors)
        name_schema = ((self.schema.get('properties') or {}).get('metadata') or {}).get('properties', {}).get('name')
        name = (obj.get('metadata') or {}).get('name')
        if name_schema and name is not None:
            validate(name, name_schema, 'metadata.name', errors)
        old_body = {k: v for k, v in old.items() if k not in ('apiVersion', 'kind', 'metadata')} if old else _MISSING
        check_rules(body, old_body, schema, '', errors)
        return errors
