"""The text a request carries: how much of it the driver takes, which characters, which parameter
keys, and how it is shown again.

CSI's "Size Limits" (spec.md): a string field is at most 128 bytes and a map<string, string> at
most 4 KiB (keys and values together). The driver answers INVALID_ARGUMENT beyond them instead of
storing and printing whatever arrives. Paths are the exception: the kubelet's staging and target
paths are longer than 128 bytes, so a path gets the kernel's own bound instead, PATH_MAX (4096
bytes including the terminating NUL, so 4095 bytes of text), and no NUL, which no path can hold.

A name, an ID or a parameter holding a control character (C0, DEL, C1) is refused: such text
rewrites the line it is printed on (a newline forges a row of `ledger audit`, an escape sequence
repaints a terminal). What was stored before this rule is still escaped wherever it is printed
(`shown`)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from csi_hostpath.core.naming import MAX_STRING_BYTES

MAX_MAP_BYTES = 4096
# PATH_MAX counts the terminating NUL.
MAX_PATH_BYTES = 4095
# The CO's own parameter keys: the external-provisioner's and external-snapshotter's
# (csi.storage.k8s.io/fstype, the secret references, and with --extra-create-metadata
# csi.storage.k8s.io/pvc/name, pv/name, volumesnapshot/name ...).
CO_KEY_PREFIX = "csi.storage.k8s.io/"
# The StorageClass and VolumeSnapshotClass parameters the driver itself reads: none. Every
# setting it has is a capability (fs_type, mount flags), a flag of the daemon, or a mutable
# parameter (core/mutable.py, checked there).
DRIVER_PARAMETER_KEYS: frozenset[str] = frozenset()

# C0, DEL and C1; shown escaped, never raw. U+2028 and U+2029 also end a line to many readers.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\\\\]")
# Longer text (stored before the size rule) is cut when shown, with its length said.
SHOWN_CHARS = 256


def has_control(text: str) -> bool:
    return _CONTROL.search(text) is not None


def _byte_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def string_problem(field: str, value: str) -> str | None:
    """Why a name, ID or other non-path string field can't be taken, or None."""
    size = _byte_len(value)
    if size > MAX_STRING_BYTES:
        return f"{field} is {size} bytes; CSI allows at most {MAX_STRING_BYTES}"
    if has_control(value):
        return f"{field} holds a control character ({shown(value)})"
    return None


def path_problem(field: str, value: str) -> str | None:
    """Why a path field can't be taken, or None. Its shape is the node service's to judge."""
    size = _byte_len(value)
    if size > MAX_PATH_BYTES:
        return f"{field} is {size} bytes; a path is at most {MAX_PATH_BYTES} (PATH_MAX)"
    if "\x00" in value:
        return f"{field} holds a NUL byte, which no path can hold"
    return None


def map_problem(field: str, entries: Mapping[str, str], *, text_rules: bool = True) -> str | None:
    """Why a map field can't be taken, or None. A secrets map is only measured (its values may
    be any text, and are never shown); every other map's keys and values must print as they
    are."""
    size = sum(_byte_len(k) + _byte_len(v) for k, v in entries.items())
    if size > MAX_MAP_BYTES:
        return f"{field} is {size} bytes; CSI allows at most {MAX_MAP_BYTES} in a map"
    if text_rules:
        for key, value in sorted(entries.items()):
            if has_control(key):
                return f"{field} key {shown(key)} holds a control character"
            if has_control(value):
                return f"{field}[{shown(key)}] holds a control character ({shown(value)})"
    return None


def unknown_parameters(field: str, keys: Iterable[str]) -> str | None:
    """A message naming the parameter keys the driver neither reads nor leaves to the CO."""
    unknown = sorted(
        k for k in keys if k not in DRIVER_PARAMETER_KEYS and not k.startswith(CO_KEY_PREFIX)
    )
    if not unknown:
        return None
    names = ", ".join(f'"{shown(k)}"' for k in unknown)
    return (
        f"unknown {field} {names}: this driver reads no class parameters of its own (only the "
        f"CO's {CO_KEY_PREFIX}* keys are taken); remove the key from the class"
    )


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char == "\\":
        return "\\\\"
    named = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(char)
    if named is not None:
        return named
    return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"


def shown(text: str, limit: int = SHOWN_CHARS) -> str:
    """Text from a request, made safe to print on one line: control characters and backslashes
    escaped (so an escape is never mistaken for one), and anything past `limit` characters
    cut, with the full length said."""
    cut = text if len(text) <= limit else text[:limit]
    out = _UNPRINTABLE.sub(_escape, cut)
    if cut is not text:
        out += f"...({len(text)} chars)"
    return out
