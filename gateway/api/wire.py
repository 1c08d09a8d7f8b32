"""Scripts and environments on the wire: any bytes, though JSON carries only text.

Inside the gateway a script or variable that is not UTF-8 is text with its odd bytes
escaped (surrogateescape). JSON cannot hold those escapes, so such a script travels as
`script_b64` (base64 of its bytes) and such variables as `<env>_b64`, a list of base64
`NAME=VALUE` entries; UTF-8 text, the usual case, travels as plain JSON strings. The sbatch
client sends this shape and the script route answers with it.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

__all__ = ["is_utf8", "wire_script"]


def is_utf8(text: str) -> bool:
    """False when `text` holds surrogate-escaped bytes."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _b64(text: str) -> str:
    return base64.b64encode(text.encode("utf-8", "surrogateescape")).decode()


def wire_script(script: str, env: Mapping[str, str], env_key: str = "env") -> dict[str, Any]:
    """`script` or `script_b64`, and `env_key` plus `<env_key>_b64`."""
    out: dict[str, Any] = {"script": script} if is_utf8(script) else {"script_b64": _b64(script)}
    plain = {k: v for k, v in env.items() if is_utf8(k) and is_utf8(v)}
    out[env_key] = plain
    if len(plain) != len(env):
        out[f"{env_key}_b64"] = [_b64(f"{k}={v}") for k, v in env.items() if k not in plain]
    return out
