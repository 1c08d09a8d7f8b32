"""JSON for the commands' start-up path, on CPython's own C accelerator.

Importing the `json` package pulls in `re` and `enum`: about 10 ms of start-up, most of
what separates a Python command from Slurm's C ones. The accelerator module `_json` that
`json` itself uses does the whole work without them. Its factories are not a public API, so
if they are missing or change shape, this falls back to `json`.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs ~5 ms to import; mypy is told it is True
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

__all__ = ["dumps", "loads"]


class _ScanContext:
    """What `_json.make_scanner` reads from json.JSONDecoder."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {"-Infinity": -float("inf"), "Infinity": float("inf"), "NaN": float("nan")}.get
    memo: dict[str, str] = {}  # noqa: RUF012 - the C scanner reads it as json.JSONDecoder's


def _no_default(value: object) -> object:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _accelerated() -> tuple[Callable[[str], Any], Callable[[Any], str]]:
    import _json

    scan = _json.make_scanner(_ScanContext())  # type: ignore[arg-type]  # duck-typed context
    encode = _json.make_encoder(
        None, _no_default, _json.encode_basestring_ascii, None, ": ", ", ", False, False, False
    )

    def loads(text: str) -> Any:
        try:
            value, end = scan(text, 0)
        except (StopIteration, SystemError, ValueError) as exc:  # the C scanner's "invalid"
            raise ValueError("malformed JSON") from exc
        if text[end:].strip():
            raise ValueError("malformed JSON: extra data")
        return value

    def dumps(value: Any) -> str:
        return "".join(encode(value, 0))

    if loads(dumps({"a": [1, "é\n", None, True, 2.5]})) != {"a": [1, "é\n", None, True, 2.5]}:
        raise TypeError("unexpected _json behaviour")
    return loads, dumps


try:
    loads, dumps = _accelerated()
except (ImportError, AttributeError, TypeError, ValueError):  # another Python: plain json
    import json

    loads, dumps = json.loads, json.dumps
