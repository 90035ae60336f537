"""Strings from pods and specs, made safe to show: the one escaping function.

A container's termination message, a spec's map keys and an API server's
message quoting them reach the job's status, its Events (readable across
namespaces by many roles) and terminals. Raw, an `ESC[2J` clears the screen of
whoever runs `kubectl describe`, an OSC 8 sequence hides a link, a carriage
return or a bidirectional override rewrites what a line seems to say, and a
line break forges a line of kuberl's own. So every such string passes through
`escape` before it is written or cut short: C0 controls other than a line break
and a tab, DEL, C1 controls and the bidirectional controls and marks become
visible escapes (`\\x1b`, `\\u202e`), as `repr` writes them. Escaping twice
changes nothing more: an escape is plain ASCII.
"""

from __future__ import annotations

import re

# C0 but \t and \n, DEL, C1; the bidi embeddings/overrides (U+202A-U+202E), isolates (U+2066-U+2069)
# and the implicit marks (ALM, LRM, RLM): the characters of "Trojan Source" (CVE-2021-42574).
_UNSAFE_CHARACTERS = r"\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_UNSAFE = re.compile(f"[{_UNSAFE_CHARACTERS}]")
_UNSAFE_OR_BREAK = re.compile(f"[{_UNSAFE_CHARACTERS}\\n]")


_NAMED = {"\n": "\\n", "\r": "\\r"}


def _visible(match: re.Match) -> str:
    char = match.group()
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def has_unsafe(text: str) -> bool:
    """Whether `escape` would change `text`."""
    return _UNSAFE.search(text) is not None


def escape(text: str) -> str:
    """`text` with every unsafe character as a visible escape; line breaks and tabs kept."""
    return _UNSAFE.sub(_visible, text)


def one_line(text: str) -> str:
    """`escape`, line breaks escaped too: for what is one line by design (a field path, a refusal)."""
    return _UNSAFE_OR_BREAK.sub(_visible, text)


def continued(text: str, source: str) -> str:
    """`escape`, each line after the first marked with its source (`[worker 0] ...`), so a
    line a pod wrote cannot pass for one of kuberl's own."""
    return escape(text).replace("\n", f"\n{source} ")


# SGR sequences (colours, bold): gymnasium colours its own warnings ("\x1b[33mWARN: …\x1b[0m"), which a log or
# `kuberl run`'s escaped output shows as literal escapes
_COLOURS = re.compile(r"\x1b\[[0-9;]*m")


def without_colours(text: str) -> str:
    """`text` without terminal colour sequences (everything else left for `escape`)."""
    return _COLOURS.sub("", text)


# The API server's limit of an Event's message (NoteLengthLimit, pkg/apis/core/validation/events.go), counted by
# Go's len, in bytes: kopf cuts a message to 1,024 characters, so one in a script of three bytes a character was
# refused whole (422) and kopf dropped the Event.
EVENT_MESSAGE_BYTES = 1024


def event_message(text: str, characters: int) -> str:
    """`text` escaped and cut to `characters`, then to EVENT_MESSAGE_BYTES of UTF-8 on a character's boundary."""
    cut = escape(text)[:characters]
    return cut.encode()[:EVENT_MESSAGE_BYTES].decode(errors="ignore")
