"""A PNG of queue length and utilisation over time, with no plotting library.

Why hand-made: the gateway installs no matplotlib, and two line series on a white canvas
need only a pixel grid, zlib and the PNG chunk layout (RFC 2083). Top panel: jobs waiting;
bottom panel: fraction of nodes busy; one colour per policy, time on the x axis.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from pathlib import Path

from gateway.simulate.engine import Outcome

__all__ = ["png_bytes", "write_plot"]

_W, _H = 900, 520
_PANEL = 240  # each panel's height; 20 px margins
_COLOURS = [(31, 119, 180), (214, 39, 40), (44, 160, 44), (148, 103, 189), (255, 127, 14)]


def png_bytes(width: int, height: int, rgb: bytearray) -> bytes:
    """An 8-bit RGB PNG of `rgb` (width * height * 3 bytes, rows top to bottom)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    stride = width * 3
    raw = b"".join(b"\x00" + bytes(rgb[y * stride : (y + 1) * stride]) for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"".join(
        (
            b"\x89PNG\r\n\x1a\n",
            chunk(b"IHDR", header),
            chunk(b"IDAT", zlib.compress(raw, 6)),
            chunk(b"IEND", b""),
        )
    )


def _line(rgb: bytearray, x0: int, y0: int, x1: int, y1: int, colour: tuple[int, int, int]) -> None:
    steps = max(abs(x1 - x0), abs(y1 - y0), 1)
    for i in range(steps + 1):
        x = x0 + (x1 - x0) * i // steps
        y = y0 + (y1 - y0) * i // steps
        if 0 <= x < _W and 0 <= y < _H:
            rgb[(y * _W + x) * 3 : (y * _W + x) * 3 + 3] = bytes(colour)


def write_plot(outcomes: Sequence[Outcome], path: Path) -> None:
    """Draw every outcome's samples (queue length on top, utilisation below)."""
    rgb = bytearray(b"\xff" * (_W * _H * 3))
    grey = (160, 160, 160)
    for top in (20, 20 + _PANEL + 20):  # panel frames
        for x0, y0, x1, y1 in (
            (40, top, _W - 20, top),
            (40, top + _PANEL, _W - 20, top + _PANEL),
            (40, top, 40, top + _PANEL),
            (_W - 20, top, _W - 20, top + _PANEL),
        ):
            _line(rgb, x0, y0, x1, y1, grey)
    samples = [s for o in outcomes for s in o.samples]
    if samples:
        t0 = min(s.t for s in samples)
        span = max(max(s.t for s in samples) - t0, 1.0)
        qmax = max(max(s.queued for s in samples), 1)
        for k, outcome in enumerate(outcomes):
            colour = _COLOURS[k % len(_COLOURS)]
            prev: tuple[int, int, int] | None = None
            for s in outcome.samples:
                x = 40 + int((s.t - t0) / span * (_W - 61))
                yq = 20 + _PANEL - int(s.queued / qmax * _PANEL)
                yu = 40 + 2 * _PANEL - int(s.busy / max(outcome.nodes, 1) * _PANEL)
                if prev is not None:
                    _line(rgb, prev[0], prev[1], x, yq, colour)
                    _line(rgb, prev[0], prev[2], x, yu, colour)
                prev = (x, yq, yu)
    path.write_bytes(png_bytes(_W, _H, rgb))
