"""A strict reader of the Prometheus text exposition format (0.0.4), written from the
format's description, independent of gateway/metrics/expo.py: tests read the gateway's
page with it, so a line the renderer breaks fails here as it would fail in Prometheus."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

__all__ = ["ExpoError", "Sample", "parse_page"]

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}


class ExpoError(ValueError):
    """A line that Prometheus would not accept."""


@dataclass(frozen=True)
class Sample:
    """One sample line, its label values unescaped."""

    name: str
    labels: dict[str, str]
    value: float


def _value(text: str, line: str) -> float:
    if text in ("+Inf", "Inf"):
        return math.inf
    if text == "-Inf":
        return -math.inf
    if text == "NaN":
        return math.nan
    try:
        return float(text)
    except ValueError:
        raise ExpoError(f"bad value {text!r} in {line!r}") from None


def _labels(text: str, i: int, line: str) -> tuple[dict[str, str], int]:
    """Labels from `text[i]` == "{" to past the closing brace."""
    out: dict[str, str] = {}
    i += 1
    while True:
        if text[i] == "}":
            return out, i + 1
        m = _LABEL.match(text, i)
        if m is None:
            raise ExpoError(f"bad label name at {i} in {line!r}")
        name = m.group()
        i = m.end()
        if text[i : i + 2] != '="':
            raise ExpoError(f'expected =" after {name} in {line!r}')
        i += 2
        value: list[str] = []
        while True:
            if i >= len(text):
                raise ExpoError(f"unterminated label value in {line!r}")
            c = text[i]
            if c == "\\":
                nxt = text[i + 1 : i + 2]
                if nxt == "\\":
                    value.append("\\")
                elif nxt == '"':
                    value.append('"')
                elif nxt == "n":
                    value.append("\n")
                else:
                    raise ExpoError(f"bad escape \\{nxt} in {line!r}")
                i += 2
            elif c == '"':
                i += 1
                break
            elif c == "\n":
                raise ExpoError(f"raw newline in a label value in {line!r}")
            else:
                value.append(c)
                i += 1
        if name in out:
            raise ExpoError(f"label {name} twice in {line!r}")
        out[name] = "".join(value)
        if text[i] == ",":
            i += 1
        elif text[i] != "}":
            raise ExpoError(f"expected , or }} at {i} in {line!r}")


def parse_page(page: str) -> tuple[list[Sample], dict[str, str]]:
    """Every sample and every family's declared type; ExpoError on the first bad line."""
    if page and not page.endswith("\n"):
        raise ExpoError("the page must end with a newline")
    samples: list[Sample] = []
    types: dict[str, str] = {}
    for line in page.split("\n")[:-1]:
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                if not _NAME.fullmatch(parts[2]):
                    raise ExpoError(f"bad metric name in {line!r}")
                if parts[1] == "TYPE":
                    if len(parts) != 4 or parts[3] not in _TYPES:
                        raise ExpoError(f"bad TYPE line {line!r}")
                    if parts[2] in types:
                        raise ExpoError(f"TYPE of {parts[2]} given twice")
                    types[parts[2]] = parts[3]
            continue
        if not line.strip():
            continue
        m = _NAME.match(line)
        if m is None:
            raise ExpoError(f"bad metric name in {line!r}")
        name = m.group()
        i = m.end()
        labels: dict[str, str] = {}
        if line[i : i + 1] == "{":
            labels, i = _labels(line, i, line)
        if line[i : i + 1] != " ":
            raise ExpoError(f"expected a space before the value in {line!r}")
        fields = line[i + 1 :].split(" ")
        if not 1 <= len(fields) <= 2:
            raise ExpoError(f"bad value/timestamp in {line!r}")
        samples.append(Sample(name, labels, _value(fields[0], line)))
    return samples, types
