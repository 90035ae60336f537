"""Decoding of built-in kinds like the API server's: unknown fields found (and dropped), wrong JSON types refused.

The schemas are Kubernetes' own OpenAPI definitions as shipped by PyPI `kubernetes-validate`.
"""
import decimal
import functools
import importlib.resources
import json
import re

SCHEMA_VERSION = 'v1.32.0-local'
_API_GROUPS = {'apiextensions.k8s.io': 'io.k8s.apiextensions-apiserver.pkg.apis.apiextensions'}


@functools.lru_cache(maxsize=1)
def _definitions() -> dict:
    root = importlib.resources.files('kubernetes_validate') / 'kubernetes-json-schema' / SCHEMA_VERSION / '_definitions.json'
    return json.loads(root.read_text())['$defs']


def definition_for(group: str, version: str, kind: str) -> dict | None:
    prefix = _API_GROUPS.get(group, f'io.k8s.api.{group.split(".")[0] if group else "core"}')
    return _definitions().get(f'{prefix}.{version}.{kind}')


def object_meta() -> dict:
    return _definitions()['io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta']


@functools.lru_cache(maxsize=1)
def _struct_names() -> dict[int, str]:
    """Each definition's Go struct name (io.k8s.api.core.v1.PodSpec: PodSpec), by the identity of its schema."""
    return {id(schema): name.rsplit('.', 1)[-1] for name, schema in _definitions().items()}


# The range of each integer format the API server's Go types have: an int32 or int64 field takes a JSON number only
# if strconv.ParseInt reads it and it fits (literalStore in sigs.k8s.io/json internal/golang/encoding/json/decode.go:
# `if err != nil || v.OverflowInt(n)` saves UnmarshalTypeError{Value: "number " + s}), so 3000000000 for an int32 is
# a 400, "json: cannot unmarshal number 3000000000 into Go struct field PodSpec.spec.priority of type int32".
INTEGER_RANGES = {'int32': (-(2**31), 2**31 - 1), 'int64': (-(2**63), 2**63 - 1)}


class TypeMismatch(ValueError):
    """A value of the wrong JSON type: the API server's decoder refuses the whole request (400)."""


class UnmarshalerError(TypeMismatch):
    """A field's own UnmarshalJSON refused its value: the decoder returns that error as it is, no "json: " before it."""


QUANTITY_REF = 'io.k8s.apimachinery.pkg.api.resource.Quantity'
# resource.ParseQuantity's errors (k8s.io/apimachinery/pkg/api/resource/quantity.go), word for word.
QUANTITY_FORMAT_WRONG = ("quantities must match the regular expression "
                         "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
QUANTITY_NUMERIC = 'unable to parse numeric part of quantity'
QUANTITY_SUFFIX = "unable to parse quantity's suffix"
_QUANTITY_SCAN = re.compile(r'[+-]?0*([0-9]*)(?:\.([0-9]*))?([eEinumkKMGTP]*[-+]?[0-9]*)')
_QUANTITY_PARTS = re.compile(r'([+-]?)0*([0-9]*)(?:\.([0-9]*))?([eEinumkKMGTP]*[-+]?[0-9]*)')
_DECIMAL_SUFFIXES = {'n': -9, 'u': -6, 'm': -3, '': 0, 'k': 3, 'M': 6, 'G': 9, 'T': 12, 'P': 15, 'E': 18}
_BINARY_SUFFIXES = {'Ki': 10, 'Mi': 20, 'Gi': 30, 'Ti': 40, 'Pi': 50, 'Ei': 60}


def quantity_error(text: str) -> str | None:
    """What resource.ParseQuantity says of `text` (Quantity.UnmarshalJSON, after strings.TrimSpace), or None where
    it parses: parseQuantityString's scan (ErrFormatWrong), suffixHandler.interpret (suffix.go: a binary or decimal
    SI suffix, or e/E and what strconv.ParseInt(_, 10, 64) reads, else ErrSuffix), then inf.Dec.SetString on the
    number where the int64 fast path does not hold it (ErrNumeric: a number of no digits, "+" or "-.")."""
    text = text.strip()
    if not text:
        return QUANTITY_FORMAT_WRONG
    if text == '0':
        return None
    scanned = _QUANTITY_SCAN.fullmatch(text)
    if scanned is None:
        return QUANTITY_FORMAT_WRONG
    num, denom, suffix = scanned.groups()
    num, denom = num or '0', denom or ''
    if suffix in _DECIMAL_SUFFIXES:
        fast = len(num) + len(denom) <= 18 and _DECIMAL_SUFFIXES[suffix] - len(denom) >= -9
    elif suffix in _BINARY_SUFFIXES:
        shift = _BINARY_SUFFIXES[suffix]
        fast = not denom and 15 - len(num) - int(shift * 3 / 10) - 1 >= 0 and int(num) << shift < 2**63
    elif len(suffix) > 1 and suffix[0] in 'eE' and re.fullmatch(r'[+-]?[0-9]+', suffix[1:]):
        parsed = int(suffix[1:]) if len(suffix[1:].lstrip('+-').lstrip('0')) <= 19 else 2**63
        if not -(2**63) <= parsed < 2**63:
            return QUANTITY_SUFFIX
        exponent = (parsed + 2**31) % 2**32 - 2**31  # int32(parsed)
        fast = len(num) + len(denom) <= 18 and exponent - len(denom) >= -9
    else:
        return QUANTITY_SUFFIX
    number = text[:len(text) - len(suffix)]  # parseQuantityString's `value`: inf.Dec.SetString reads it
    return QUANTITY_NUMERIC if not fast and not any(c.isdigit() for c in number) else None


_INT64_MAX = 2**63 - 1
_SI_BY_EXPONENT = {exponent: suffix for suffix, exponent in _DECIMAL_SUFFIXES.items()}
_BINARY_BY_POWER = {power // 10: suffix for suffix, power in _BINARY_SUFFIXES.items()}


def canonical_quantity(text: str) -> str:
    """The string the API server stores for a quantity ParseQuantity reads (quantity_error(text) is None): what
    Quantity.MarshalJSON writes after UnmarshalJSON (k8s.io/apimachinery/pkg/api/resource/quantity.go).

    ParseQuantity keeps the text as it came (TrimSpace'd) where its int64 fast path finds it canonical already (a
    decimal: scale a multiple of 3, digits neither ending in 000 nor starting with 0; a binary one: digits not a
    multiple of 8), so "+1", "1e3" and "1.500" are stored as written; anything else is CanonicalizeBytes' form:
    no fraction, the largest suffix of the format it was written in (1000m: 1, 0.5: 500m, 1.5Gi: 1536Mi), a
    binary amount under 1024 or of a fraction written in decimal SI."""
    text = text.strip()
    if text == '0':
        return text
    sign, num, denom, suffix = _QUANTITY_PARTS.fullmatch(text).groups()
    num, denom = num or '0', denom or ''
    negative = sign == '-'
    if suffix in _DECIMAL_SUFFIXES:
        form, exponent = 'DecimalSI', _DECIMAL_SUFFIXES[suffix]
    elif suffix in _BINARY_SUFFIXES:
        form, exponent = 'BinarySI', _BINARY_SUFFIXES[suffix]
    else:
        form, exponent = 'DecimalExponent', (int(suffix[1:]) + 2**31) % 2**32 - 2**31  # int32(ParseInt(...))
    # the int64 fast path: value * mantissa at a decimal scale of at least -9, in range
    if form == 'BinarySI':
        precision = 15 - len(num) - exponent * 3 // 10 - 1 if not denom else -1
        mantissa, scale = 1 << exponent, -len(denom)
    else:
        precision, mantissa, scale = 18 - len(num) - len(denom), 1, exponent - len(denom)
    shifted = num + denom
    if precision >= 0 and scale >= -9 and int(shifted) * mantissa <= _INT64_MAX:
        if form == 'BinarySI' and int(shifted) & 7 or (
                form != 'BinarySI' and scale % 3 == 0 and not shifted.endswith('000') and shifted[0] != '0'):
            return text
        unscaled = int(shifted) * mantissa
    else:  # inf.Dec: exact, rounded up to 1n, a binary amount capped at 2^63-1 and under 1 decimal
        unscaled, scale = int(shifted), -len(denom)
        if form == 'BinarySI':
            unscaled <<= exponent
        else:
            scale += exponent
        if scale < -9 and unscaled:
            drop = -9 - scale
            unscaled = 1 if drop >= len(str(unscaled)) else -(-unscaled // 10**drop)
            scale = -9
        if form == 'BinarySI' and unscaled > _INT64_MAX * 10**-scale:  # a binary amount's scale is 0 to -9 here
            unscaled, scale = _INT64_MAX, 0
    return ('-' if negative and unscaled else '') + _canonical_bytes(unscaled, scale, form)


_EXACT = decimal.Context(prec=4000, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)


def quantity_amount(text: str) -> decimal.Decimal:
    """The amount a stored quantity stands for (its suffix applied, exactly), for the validation that compares
    amounts as Quantity.Cmp does: a stored quantity is canonical, its rounding to 1n and binary cap done."""
    sign, num, denom, suffix = _QUANTITY_PARTS.fullmatch(text.strip()).groups()
    digits = decimal.Decimal(f'{sign}{num or 0}.{denom or 0}')
    if suffix in _BINARY_SUFFIXES:
        return _EXACT.multiply(digits, 2 ** _BINARY_SUFFIXES[suffix])
    exponent = _DECIMAL_SUFFIXES[suffix] if suffix in _DECIMAL_SUFFIXES else (int(suffix[1:]) + 2**31) % 2**32 - 2**31
    return digits.scaleb(exponent, _EXACT)


def _canonical_bytes(unscaled: int, scale: int, form: str) -> str:
    """CanonicalizeBytes of a non-negative unscaled * 10^scale: a binary amount of at least 1024 that is whole is
    written base 1024 (AsCanonicalBase1024Bytes), anything else base 10 with the exponent a multiple of 3,
    rounded down (AsCanonicalBytes), named by the format's suffix (suffixHandler.constructBytes)."""
    if not unscaled:
        return '0'
    if form == 'BinarySI':
        whole = unscaled * 10**scale if scale >= 0 else None
        if scale < 0 and unscaled % 10**-scale == 0:
            whole = unscaled // 10**-scale
        if whole is not None and whole >= 1024:
            power = 0
            while whole % 1024 == 0 and whole >= 1024:
                whole, power = whole // 1024, power + 1
            return f'{whole}{_BINARY_BY_POWER.get(power, "")}'
        form = 'DecimalSI'
    while unscaled % 10 == 0:
        unscaled, scale = unscaled // 10, scale + 1
    while scale % 3:
        unscaled, scale = unscaled * 10, scale - 1
    if form == 'DecimalSI' and scale in _SI_BY_EXPONENT:
        return f'{unscaled}{_SI_BY_EXPONENT[scale]}'
    # past E (10^18) decimal SI has no suffix: v1.32's constructBytes gave none, dropping the exponent ("1000E" came
    # back "1"); later apimachinery writes the exponent instead, as here. Neither is a form kuberl writes.
    return f'{unscaled}e{scale}' if scale else str(unscaled)


def _resolve(schema: dict) -> dict:
    while '$ref' in schema:
        schema = _definitions()[schema['$ref'].rsplit('/', 1)[-1]]
    return schema


def _json_type(value: object) -> str:
    if isinstance(value, bool):
        return 'bool'
    if isinstance(value, (int, float)):
        return 'number'
    if isinstance(value, str):
        return 'string'
    if isinstance(value, list):
        return 'array'
    if isinstance(value, dict):
        return 'object'
    return 'null'


_CHECKS = {
    'object': lambda v: isinstance(v, dict),
    'array': lambda v: isinstance(v, list),
    'string': lambda v: isinstance(v, str),
    'boolean': lambda v: isinstance(v, bool),
    'null': lambda v: v is None,
    'integer': lambda v: (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer()),
    'number': lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
}


def _accepts(types: list[str], value: object) -> bool:
    return any(_CHECKS.get(t, lambda _: True)(value) for t in types)


def decode(value: object, schema: dict, path: str, unknown: list[str], struct: str = '') -> object:
    """Walk `value` against `schema`: drop and record unknown fields in place, raise TypeMismatch on a wrong type;
    returns what the server stores for it (the same object, or a quantity's canonical string, set in place below it).

    `struct`: the Go struct holding the field at `path`, which the decoder's message names before the path
    (UnmarshalTypeError.Error: "into Go struct field " + e.Struct + "." + e.Field)."""
    if schema.get('$ref', '').endswith(f'/{QUANTITY_REF}') and value is not None:
        # Quantity.UnmarshalJSON hands ParseQuantity the raw bytes, unquoted: a number's text parses, true or an
        # object does not (ErrFormatWrong), and its error is the decoder's (json.Unmarshaler: returned as it is).
        # A string's bytes as sent, escapes and all: "1\n" reaches it as 1\n, which TrimSpace leaves.
        text = json.dumps(value, ensure_ascii=False)[1:-1] if isinstance(value, str) else json.dumps(value)
        problem = None if isinstance(value, int | float) and not isinstance(value, bool) else quantity_error(text)
        if problem:
            raise UnmarshalerError(problem)
        return canonical_quantity(text)  # the decoded Quantity is what is stored, as MarshalJSON writes it
    schema = _resolve(schema)
    field = f'{struct}.' * bool(struct) + re.sub(r'\[\d+\]', '', path)
    if 'oneOf' in schema:
        if not any(_accepts(_types(_resolve(option)), value) for option in schema['oneOf']):
            raise TypeMismatch(f'cannot unmarshal {_json_type(value)} into Go struct field {field} of type int-or-string')
        return value
    types = _types(schema)
    if types and not _accepts(types, value):
        expected = next(t for t in types if t != 'null')
        raise TypeMismatch(f'cannot unmarshal {_json_type(value)} into Go struct field {field} of type {expected}')
    if 'integer' in types and schema.get('format') in INTEGER_RANGES and value is not None:
        low, high = INTEGER_RANGES[schema['format']]
        if not low <= value <= high:
            raise TypeMismatch(f'cannot unmarshal number {json.dumps(value)} into Go struct field {field} of type {schema["format"]}')
    if isinstance(value, dict):
        struct = _struct_names().get(id(schema), struct)
        properties = schema.get('properties')
        additional = schema.get('additionalProperties')
        for key in list(value):
            child = f'{path}.{key}' if path else key
            if properties is not None and key in properties:
                value[key] = decode(value[key], properties[key], child, unknown, struct)
            elif isinstance(additional, dict):
                value[key] = decode(value[key], additional, child, unknown, struct)
            elif properties is not None and additional is None:
                unknown.append(child)
                del value[key]
    elif isinstance(value, list) and isinstance(schema.get('items'), dict):
        for index, item in enumerate(value):
            value[index] = decode(item, schema['items'], f'{path}[{index}]', unknown, struct)
    return value


def _types(schema: dict) -> list[str]:
    kind = schema.get('type')
    if kind is None:
        return []
    return kind if isinstance(kind, list) else [kind]
