"""json-c's string escapes, now one `str.translate` (issue 14: `squeue --json` with 10,000
jobs spent 2 s escaping character by character); the old loop is kept as the reference."""

from __future__ import annotations

from gateway.compat.fmt_common import _escape


def _escape_by_character(text: str) -> str:
    """json-c's escapes as the JSON printer applied them before, one character at a time."""
    named = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n"}
    named |= {"\r": "\\r", "\t": "\\t"}
    return "".join(named.get(ch) or (f"\\u{ord(ch):04x}" if ord(ch) < 0x20 else ch) for ch in text)


def test_json_escapes_are_json_cs_for_every_character() -> None:
    every = "".join(map(chr, range(0x300))) + 'é\udcff€/\\"𝄞'
    assert _escape(every) == _escape_by_character(every)
    assert _escape('a/b"\x01') == 'a\\/b\\"\\u0001'
