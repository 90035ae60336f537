"""YAML that kuberl prints or writes for people to read and apply: letters as written.

PyYAML's default writes every non-ASCII character as an escape (`"\\xE9t\\xE9"` for `été`, `\\u6771\\u4EAC`
for `東京`), so an annotation, a command argument or an env value came out of `kuberl convert` unreadable,
though kubectl reads UTF-8 as is. Written raw instead, a bidirectional override or an invisible mark would
make a line on screen say something else than the file ("Trojan Source"), so a string holding one of
safetext's unsafe characters is still written double-quoted with escapes: the value read back is the same
either way.
"""

from __future__ import annotations

import yaml

from . import safetext
from .yamlreader import STR, kubectl_scalar


class ReadableDumper(yaml.SafeDumper):
    """A SafeDumper that writes printable non-ASCII characters as they are and escapes the unsafe ones."""

    def __init__(self, *args, **kwargs):
        if kwargs.get("allow_unicode") is None:  # yaml.dump passes None unless told
            kwargs["allow_unicode"] = True
        super().__init__(*args, **kwargs)

    def resolve(self, kind, value, implicit):
        """A string PyYAML or kubectl (go-yaml v2: `y`, `0o17`) would read as another type resolves so, and is
        written quoted: `kubectl apply` of what convert or render wrote sent `--compile y` as `true`."""
        tag = super().resolve(kind, value, implicit)
        if kind is yaml.ScalarNode and implicit[0] and tag == STR:
            return kubectl_scalar(value)[0]
        return tag

    def analyze_scalar(self, scalar: str):  # an unsafe character makes the scalar double-quoted, escaped
        if not (self.allow_unicode and safetext.has_unsafe(scalar)):
            return super().analyze_scalar(scalar)
        self.allow_unicode = False
        try:
            return super().analyze_scalar(scalar)
        finally:
            self.allow_unicode = True

    def write_double_quoted(self, text: str, split: bool = True) -> None:
        if not (self.allow_unicode and safetext.has_unsafe(text)):
            return super().write_double_quoted(text, split)
        self.allow_unicode = False
        try:
            return super().write_double_quoted(text, split)
        finally:
            self.allow_unicode = True


def dump_all(docs: list, dumper: type[ReadableDumper], encoding: str | None = None, **options) -> str:
    """`docs` as one YAML stream by `dumper`; for a stream of `encoding` that cannot take a character written
    (a console in a legacy code page and 東京), every non-ASCII character escaped: the same values."""
    text = yaml.dump_all(docs, Dumper=dumper, **options)
    try:
        text.encode(encoding or "utf-8")
    except (UnicodeEncodeError, LookupError):
        return yaml.dump_all(docs, Dumper=dumper, allow_unicode=False, **options)
    return text
