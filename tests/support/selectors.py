"""Label and field selectors, parsed and matched the way the API server does."""
import re
from dataclasses import dataclass

_SET_REQUIREMENT = re.compile(r'^\s*(!?)([A-Za-z0-9._/-]+)\s*(?:(notin|in)\s*\(([^)]*)\))?\s*$')


class SelectorError(ValueError):
    """A selector the API server would refuse with 400 Bad Request."""


@dataclass(frozen=True)
class LabelRequirement:
    key: str
    operator: str  # '=', '!=', 'in', 'notin', 'exists', '!'
    values: frozenset[str] = frozenset()

    def matches(self, labels: dict[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        match self.operator:
            case '=':
                return present and value in self.values
            case '!=':
                return not present or value not in self.values
            case 'in':
                return present and value in self.values
            case 'notin':
                return not present or value not in self.values
            case 'exists':
                return present
            case _:
                return not present


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside the parentheses of `in (a,b)`."""
    parts, depth, current = [], 0, ''
    for char in text:
        depth += char == '('
        depth -= char == ')'
        if char == ',' and depth == 0:
            parts.append(current)
            current = ''
        else:
            current += char
    parts.append(current)
    return [part for part in parts if part.strip()]


def parse_label_selector(text: str | None) -> list[LabelRequirement]:
    requirements = []
    for part in _split_top_level(text or ''):
        if '!=' in part:
            key, value = part.split('!=', 1)
            requirements.append(LabelRequirement(key.strip(), '!=', frozenset([value.strip()])))
        elif '==' in part or ('=' in part and '(' not in part):
            key, value = re.split('==|=', part, maxsplit=1)
            requirements.append(LabelRequirement(key.strip(), '=', frozenset([value.strip()])))
        else:
            match = _SET_REQUIREMENT.match(part)
            if not match:
                raise SelectorError(f'unable to parse requirement: {part!r}')
            negated, key, operator, values = match.groups()
            if operator:
                if negated:
                    raise SelectorError(f'unable to parse requirement: {part!r}')
                requirements.append(LabelRequirement(key, operator, frozenset(v.strip() for v in values.split(','))))
            else:
                requirements.append(LabelRequirement(key, '!' if negated else 'exists'))
    return requirements


def labels_match(requirements: list[LabelRequirement], labels: dict[str, str] | None) -> bool:
    return all(requirement.matches(labels or {}) for requirement in requirements)


@dataclass(frozen=True)
class FieldRequirement:
    path: str
    equal: bool
    value: str


def parse_field_selector(text: str | None, supported: frozenset[str]) -> list[FieldRequirement]:
    """Parse `a.b=c,d!=e`; a field the resource does not index is refused, as the API server does."""
    requirements = []
    for part in _split_top_level(text or ''):
        if '!=' in part:
            path, value = part.split('!=', 1)
            equal = False
        elif '=' in part:
            path, value = re.split('==|=', part, maxsplit=1)
            equal = True
        else:
            raise SelectorError(f'invalid selector: {part!r}; can\'t understand {part!r}')
        path = path.strip()
        if path not in supported:
            raise SelectorError(f'field label not supported: {path}')
        requirements.append(FieldRequirement(path, equal, value.strip()))
    return requirements


def field_value(obj: dict, path: str) -> str:
    value: object = obj
    for key in path.split('.'):
        value = value.get(key) if isinstance(value, dict) else None
    if value is None:
        return ''
    if isinstance(value, bool):
        return 'true' if value else 'false'
    return str(value)


def fields_match(requirements: list[FieldRequirement], obj: dict) -> bool:
    return all((field_value(obj, r.path) == r.value) == r.equal for r in requirements)
