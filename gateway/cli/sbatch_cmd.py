"""`sbatch`: hand the invocation to the gateway and print what sbatch prints.

The gateway is the authority on parsing: it runs sbatch's first pass to say which file is
the script (`/v1/sbatch/locate`), this command reads it (with the user's own permissions),
and the gateway runs the remaining passes, stores the job durably and answers with sbatch's
output. To save that round trip in the usual cases, the command guesses first (--wrap, or
the first operand naming a readable `#!` file) and submits at once; the gateway checks the
guess against its own first pass and, when it is wrong, answers as locate would, stores
nothing, and the command continues as if it had asked. Only C-backed standard modules are
imported on this path, so the command starts about as fast as Slurm's. Without a gateway,
--help/--usage/--version are still answered locally.
"""

from __future__ import annotations

import binascii
import posix
import resource
import sys
import time

from gateway.cli.fastclient import AnswerLost, FastClient, FastClientError, refusal_text
from gateway.cli.paths import environ, socket_path

TYPE_CHECKING = False  # typing costs ~5 ms to import; mypy is told it is True
if TYPE_CHECKING:
    import signal as _signal
    from collections.abc import Sequence
    from typing import Any
else:
    import _signal  # `signal` imports enum: milliseconds

__all__ = ["allocate", "main"]

_PROG = "sbatch"
_ACTIVE = ("PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING")


def _is_file(path: str) -> bool:
    try:
        return posix.stat(path).st_mode & 0o170000 == 0o100000  # S_ISREG
    except OSError:
        return False


def _find_script(name: str, cwd: str) -> str | None:
    """sbatch's `search_path`: a path with '/' as is; else the cwd, then $PATH.
    (`posix`, not `os`: see gateway/cli/paths.py.)"""
    if "/" in name:
        path = name if name.startswith("/") else f"{cwd.rstrip('/')}/{name}"
        return path if posix.access(path, posix.R_OK) else None
    path_var = posix.environ.get(b"PATH", b"").decode("utf-8", "surrogateescape")
    for directory in [cwd, *path_var.split(":")]:
        path = f"{(directory or '.').rstrip('/')}/{name}"
        if _is_file(path) and posix.access(path, posix.R_OK):
            if not directory.startswith("/"):
                import os.path  # rare: a relative directory in PATH

                return os.path.abspath(path)
            return path
    return None


_GUESS_LIMIT = 4 * 1024 * 1024  # the gateway's largest script


def _guess(args: list[str], cwd: str) -> dict[str, Any] | None:
    """The script fields of a submission made without asking the gateway first, or None
    when no cheap guess exists (a script on standard input, an abbreviated --wrap)."""
    if any(a == "--wrap" or a.startswith("--wrap=") for a in args[1:]):
        return {"script": None, "script_path": None, "script_operand": None}
    for arg in args[1:]:
        if arg.startswith("-") or not arg:
            continue
        path = _find_script(arg, cwd)
        if path is None or not _is_file(path):
            continue
        try:
            with open(path, "rb") as fh:
                data = fh.read(_GUESS_LIMIT + 1)
        except OSError:
            continue
        if data.startswith(b"#!") and len(data) <= _GUESS_LIMIT:
            text = data.decode("utf-8", errors="surrogateescape")
            return {"script": text, "script_path": path, "script_operand": arg}
    return None


_RLIMITS = (  # what sbatch propagates by default (PropagateResourceLimits=ALL)
    ("CPU", resource.RLIMIT_CPU),
    ("FSIZE", resource.RLIMIT_FSIZE),
    ("DATA", resource.RLIMIT_DATA),
    ("STACK", resource.RLIMIT_STACK),
    ("CORE", resource.RLIMIT_CORE),
    ("RSS", resource.RLIMIT_RSS),
    ("NPROC", resource.RLIMIT_NPROC),
    ("NOFILE", resource.RLIMIT_NOFILE),
    ("MEMLOCK", resource.RLIMIT_MEMLOCK),
    ("AS", resource.RLIMIT_AS),
)


def _environment() -> dict[str, str]:
    """The environment sbatch sends, with SLURM_UMASK (`0022`: the caller's umask) unless
    already set, as sbatch's `_set_umask_env`, and the caller's soft resource limits as
    SLURM_RLIMIT_* (`_set_rlimit_env`); slurmstepd applies both to the job."""
    env = environ()
    if "SLURM_UMASK" not in env:
        mask = posix.umask(0)
        posix.umask(mask)
        env["SLURM_UMASK"] = f"{mask & 0o777:04o}"
    for name, which in _RLIMITS:
        soft, _ = resource.getrlimit(which)
        env[f"SLURM_RLIMIT_{name}"] = str(soft if soft >= 0 else (1 << 64) - 1)
    return env


def _read(path: str | None) -> str:
    if path is None:
        data = sys.stdin.buffer.read()
    else:
        with open(path, "rb") as fh:
            data = fh.read()
    return data.decode("utf-8", errors="surrogateescape")


def _offline(args: list[str]) -> int:
    """No gateway: answer what sbatch answers without a controller, or say so."""
    from gateway.compat.errors import CompatError
    from gateway.compat.optypes import EarlyExit, ParseContext
    from gateway.compat.sbatch import first_pass

    try:
        first_pass(args, ParseContext(cwd=posix.getcwd(), uid=posix.getuid()))
    except EarlyExit as done:
        sys.stdout.write(done.stdout)
        return done.code
    except CompatError as exc:
        sys.stderr.write(exc.render(_PROG))
        return exc.exit_code
    sys.stderr.write(
        f"{_PROG}: error: Batch job submission failed: Unable to contact slurm controller "
        f"(connect failure): the Caldera gateway at {socket_path()} is not running "
        "(start it with: caldera up)\n"
    )
    return 1


_RETRY_S = 20.0  # how long a submission whose answer was lost is retried (a restart)


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # bytes read with surrogateescape
        return False
    return True


def _b64(text: str) -> str:
    return binascii.b2a_base64(text.encode("utf-8", "surrogateescape"), newline=False).decode()


def _wire(body: dict[str, Any]) -> dict[str, Any]:
    """The script and environment as JSON can carry them: a script or variable that is
    not UTF-8 (sbatch takes any bytes) travels as base64 (`script_b64`, and `env_b64` of
    `NAME=VALUE` entries). Of a script over slurmctld's size limit only one byte more
    than the limit travels: enough for the gateway to refuse it as slurmctld does."""
    out = dict(body)
    script = out.get("script")
    if script is not None and len(script) * 4 > _GUESS_LIMIT:
        raw = script.encode("utf-8", "surrogateescape")
        if len(raw) > _GUESS_LIMIT:
            script = out["script"] = raw[: _GUESS_LIMIT + 1].decode("utf-8", "surrogateescape")
    if script is not None and not _utf8(script):
        out["script"] = None
        out["script_b64"] = _b64(script)
    env: dict[str, str] = out["env"]
    odd = [k for k, v in env.items() if not (_utf8(k) and _utf8(v))]
    if odd:
        out["env"] = {k: v for k, v in env.items() if k not in odd}
        out["env_b64"] = [_b64(f"{k}={env[k]}") for k in odd]
    return out


class _Quiet:
    """No progress line (stderr is not a terminal): the context manager that does nothing."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _submit_call(client: FastClient, body: dict[str, Any]) -> Any:
    """`_submit_once`, with a progress line on a terminal when the answer is slow: `-M a,b`
    waits for the gateway to route the job (up to 3 s), as Slurm's sbatch asks each
    cluster's planner before it answers. Nothing is imported for it off a terminal."""
    progress: Any = _Quiet()
    if posix.isatty(2):
        from gateway.cli.progress import Ticker

        progress = Ticker(f"{_PROG}: submitting", delay_s=0.5)
    with progress:
        return _submit_retrying(client, body)


def _submit_retrying(client: FastClient, body: dict[str, Any]) -> Any:
    """POST /v1/sbatch with this invocation's token. When the connection ends after the
    request was sent (the gateway stopped or restarted: the job may be stored), send it
    again with `retry` until the gateway answers: it finds the token's job and answers with
    its id, or stores the job once. Raises FastClientError when it never comes back."""
    body = _wire(body)
    retry = False
    deadline = 0.0
    delay = 0.1
    while True:
        try:
            return _call(client, "/v1/sbatch", {**body, "retry": retry})
        except AnswerLost:
            if not retry:
                sys.stderr.write(
                    f"{_PROG}: error: the gateway closed the connection before answering; "
                    "retrying (the same submission, never a second job)\n"
                )
                retry = True
                deadline = time.monotonic() + _RETRY_S
        except FastClientError:
            if not retry:
                raise  # never sent: the gateway is not running
        if time.monotonic() >= deadline:
            raise AnswerLost(
                "Socket timed out on send/recv operation (the Caldera gateway stopped before "
                f"answering and did not come back within {_RETRY_S:g} s; the job may exist: "
                "check squeue)"
            )
        time.sleep(delay)
        delay = min(delay * 2, 1.0)


def _call(client: FastClient, url: str, body: Any = None, method: str = "POST") -> Any:
    status, data = client.request(method, url, body)
    if status >= 400:
        raise RuntimeError(refusal_text(data.get("detail") if isinstance(data, dict) else data))
    return data


def _waited_code(status: int) -> int:
    """A finished job's wait status as `sbatch --wait` exits: its exit code, or 1 when a
    signal ended it (the test cluster: `kill -9 $$` gives 1)."""
    return (status >> 8) & 0xFF if not status & 0x7F else 1


def _wait(client: FastClient, job_id: int) -> int:
    """`--wait`: poll until the job (every task of an array) ends; return its exit code."""
    delay = 0.1
    while True:
        jobs = _call(client, f"/v1/jobs/{job_id}", method="GET")["jobs"]
        if jobs and all(j["state"] not in _ACTIVE for j in jobs):
            # sbatch.c's _job_wait: a job its signal ended counts as 1, not the signal
            codes = [_waited_code(int(j["exit_code"])) for j in jobs]
            return max(codes, default=0)
        time.sleep(delay)
        delay = min(delay * 1.5, 1.0)


def _located(where: dict[str, Any], cwd: str) -> dict[str, Any] | int:
    """The script fields once the gateway has said where the script is, or an exit code."""
    script: str | None = None
    script_path: str | None = None
    name = where.get("script")
    if not where["wrap"]:
        if name is not None:
            script_path = _find_script(name, cwd)
            if script_path is None:
                sys.stderr.write(f"{_PROG}: error: Unable to open file {name}\n")
                return 1
        try:
            script = _read(script_path)
        except OSError:
            sys.stderr.write(f"{_PROG}: error: Unable to open file {name}\n")
            return 1
    return {"script": script, "script_path": script_path}


def _locate(client: FastClient, args: list[str]) -> dict[str, Any] | int:
    """Ask the gateway which operand is the script; an int is the command's exit code."""
    try:
        where = _call(client, "/v1/sbatch/locate", {"argv": args})
    except FastClientError as exc:
        if exc.connect:
            return _offline(args)
        sys.stderr.write(f"{_PROG}: error: Batch job submission failed: {exc}\n")
        return 1
    except RuntimeError as exc:
        sys.stderr.write(f"{_PROG}: error: {exc}\n")
        return 1
    if where.get("early") is not None:
        sys.stdout.write(where["early"]["stdout"])
        return int(where["early"]["code"])
    if where.get("error") is not None:
        sys.stderr.write(where["error"]["stderr"])
        return int(where["error"]["exit_code"])
    return dict(where)


def _submit(client: FastClient, base: dict[str, Any], fields: dict[str, Any]) -> Any:
    try:
        return _submit_call(client, {**base, **fields})
    except (FastClientError, RuntimeError) as exc:
        sys.stderr.write(f"{_PROG}: error: Batch job submission failed: {exc}\n")
        return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `sbatch` command."""
    # a closed pipe (stdout, or the gateway's socket) is an error to report, never a silent
    # death by SIGPIPE (exit 141) that leaves the user guessing whether the job exists
    _signal.signal(_signal.SIGPIPE, _signal.SIG_IGN)
    try:
        code = _main(argv)
        sys.stdout.flush()  # here, so that a closed pipe is reported
        return code
    except BrokenPipeError:
        try:  # noqa: SIM105 - contextlib costs milliseconds to import
            sys.stderr.write(f"{_PROG}: error: write error: Broken pipe\n")
        except OSError:
            pass
        return 1


def allocate(argv: Sequence[str], command: str) -> int:
    """sbatch's submission of an allocation for salloc (gateway/cli/salloc_cmd.py): the
    job records `command` as its Command and is no batch job (BatchFlag=0, no batch step)."""
    return _main(argv, {"allocation": command})


def _main(argv: Sequence[str] | None, extra: dict[str, Any] | None = None) -> int:
    args = [_PROG, *(sys.argv[1:] if argv is None else argv)]
    cwd = posix.getcwd()
    client = FastClient(socket_path())
    base = {
        **(extra or {}),
        "argv": args,
        "env": _environment(),
        "cwd": cwd,
        "host": posix.uname().nodename.split(".")[0],
        # one random token per invocation: a retry after a lost answer finds its job
        "token": posix.urandom(16).hex(),
    }
    out: Any = None
    guess = _guess(args, cwd)
    if guess is not None:
        try:
            out = _submit_call(client, {**base, **guess, "located": False})
        except FastClientError as exc:
            if exc.connect:
                return _offline(args)
            sys.stderr.write(f"{_PROG}: error: Batch job submission failed: {exc}\n")
            return 1
        except RuntimeError as exc:
            sys.stderr.write(f"{_PROG}: error: Batch job submission failed: {exc}\n")
            return 1
    if out is None or out.get("need_script") is not None:
        where = out["need_script"] if out is not None else _locate(client, args)
        if isinstance(where, int):
            return where
        fields = _located(where, cwd)
        if isinstance(fields, int):
            return fields
        out = _submit(client, base, fields)
        if out is None:
            return 1
    sys.stdout.write(out["stdout"])
    sys.stderr.write(out["stderr"])
    code = int(out["exit_code"])
    if code == 0 and out["job_id"] is not None and out.get("wait"):
        return _wait(client, int(out["job_id"]))
    return code


if __name__ == "__main__":
    sys.exit(main())
