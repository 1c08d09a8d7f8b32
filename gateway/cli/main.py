"""`caldera`: start and stop the gateway, print the shims directory, and run Slurm's commands
(`caldera sbatch ...` is the same as the `sbatch` shim).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, NoReturn

import click

from gateway.cli.client import Client, GatewayUnavailable
from gateway.cli.progress import Ticker
from gateway.control.config import default_home, load_config
from gateway.simulate.cli import simulate_command

__all__ = ["main"]

SLURM_COMMANDS = {
    "sbatch": "gateway.cli.sbatch_cmd",
    "squeue": "gateway.cli.squeue_cmd",
    "scancel": "gateway.cli.scancel_cmd",
    "sinfo": "gateway.cli.sinfo_cmd",
    "sacct": "gateway.cli.sacct_cmd",
    "scontrol": "gateway.cli.scontrol_cmd",
    "srun": "containers.srun",
    "salloc": "gateway.cli.salloc_cmd",
    "sacctmgr": "gateway.cli.sacctmgr_cmd",
    "sshare": "gateway.cli.sshare_cmd",
    "sprio": "gateway.cli.sprio_cmd",
}
_PASS = {"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []}


def _ping(timeout: float = 2.0) -> dict[str, object] | None:
    try:
        data = Client(timeout=timeout).get("/v1/ping")
    except (GatewayUnavailable, OSError, Exception):  # noqa: BLE001 - any failure: not up
        return None
    return data if isinstance(data, dict) else None


@click.group()
@click.version_option("0.1.0", prog_name="caldera")
def cli() -> None:
    """Caldera: Slurm-compatible batch jobs on this machine, Slurm clusters and Kubernetes."""


@cli.command()
@click.option("--foreground", is_flag=True, help="Run in this process (logs to stderr).")
@click.option("--timeout", default=20.0, show_default=True, help="Seconds to wait for it.")
@click.option(
    "--force-damaged-store",
    is_flag=True,
    help="Serve a job store that fails its integrity check (see docs/operating.md).",
)
def up(foreground: bool, timeout: float, force_damaged_store: bool) -> None:
    """Start the gateway (store, scheduler, local backend, API on a Unix socket)."""
    from gateway.control.backends import cluster_plans
    from gateway.store.startup import FORCE_ENV, HOME_MODE, READY_ENV

    try:
        config = load_config()
        cluster_plans(config)  # each cluster's own settings, read by its adapter's parser
    except (OSError, ValueError) as exc:  # ValueError: a bad caldera.toml
        _fail(f"cannot start the gateway: {exc}")
    if _ping():
        click.echo(f"caldera: gateway already running on {config.socket_path}")
        return
    config.home.mkdir(parents=True, exist_ok=True)
    os.chmod(config.home, HOME_MODE)  # others reach the socket, and nothing else
    env = dict(os.environ, CALDERA_HOME=str(config.home))
    if force_damaged_store:
        env[FORCE_ENV] = os.environ[FORCE_ENV] = "1"
    if foreground:
        from gateway.daemon import main as daemon_main

        sys.exit(daemon_main([str(config.home)]))
    log_path = config.home / "gateway.log"
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    log = os.open(log_path, flags, 0o600)  # jobs' names and errors: root's only
    os.fchmod(log, 0o600)
    report_r, report_w = os.pipe()  # the daemon says "ready" or why not; a full disk cannot
    env[READY_ENV] = str(report_w)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.daemon", str(config.home)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            env=env,
            pass_fds=(report_w,),
        )
    finally:
        os.close(report_w)
        os.close(log)
    deadline = time.monotonic() + timeout
    # a progress line on a terminal while the daemon opens its store and backends
    with Ticker("caldera: starting the gateway", timeout), os.fdopen(report_r, "rb") as report:
        said = _read_report(report, deadline)
    if said.startswith("error: "):
        _died(config.home, proc, said.removeprefix("error: "))
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            _died(config.home, proc, "it exited before answering")
        if _ping(0.5):
            click.echo(f"caldera: gateway running (pid {proc.pid}) on {config.socket_path}")
            _check_commands_for_others()
            return
        time.sleep(0.05)
    _fail(f"the gateway (pid {proc.pid}) did not answer within {timeout:g} s; see {log_path}")


def _check_commands_for_others() -> None:
    """Warn when users other than root could not run the Slurm commands (or srun in their
    jobs) of this install: the interpreter or the package sits where they cannot read."""
    from containers.interpreter import problem_for_others, shared_python

    problem = problem_for_others(shared_python(sys.executable), _import_roots())
    if problem is not None:
        click.echo(
            f"caldera: warning: users other than root cannot run sbatch, squeue, srun...: "
            f"{problem}; install Caldera where every user can read it (e.g. "
            "/opt or /usr/local) and make /usr/bin/python3 available",
            err=True,
        )


def _read_report(report: IO[bytes], deadline: float) -> str:
    """The daemon's one-line start-up report; "" when it closed the pipe without one (it
    died) or said nothing before the deadline."""
    import select

    data = b""
    while b"\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([report], [], [], left)[0]:
            break
        chunk = os.read(report.fileno(), 4096)
        if not chunk:
            break
        data += chunk
    return data.decode("utf-8", "replace").strip()


def _died(home: Path, proc: subprocess.Popen[bytes], reason: str) -> NoReturn:
    """Report a daemon that did not start: why, its exit status, its log's last lines."""
    try:
        code = proc.wait(10)
        status = f"exit status {code}" if code >= 0 else f"killed by signal {-code}"
    except subprocess.TimeoutExpired:
        status = f"pid {proc.pid} still running"
    lines = [f"the gateway did not start: {reason} ({status})"]
    disk = os.statvfs(home)
    if disk.f_bavail == 0 or disk.f_favail == 0:
        lines.append(f"no space left on the file system of {home}")
    log_path = home / "gateway.log"
    try:
        tail = log_path.read_text(errors="replace").splitlines()[-10:]
    except OSError as exc:
        tail = [f"({exc.strerror})"]
    lines.append(f"last lines of {log_path}:")
    lines.extend(f"  {line}" for line in tail or ["(empty)"])
    _fail("\n".join(lines))


def _fail(message: str) -> NoReturn:
    click.echo(f"caldera: error: {message}", err=True)
    sys.exit(1)


@cli.command()
@click.option("--timeout", default=30.0, show_default=True)
def down(timeout: float) -> None:
    """Stop the gateway (running jobs keep running and are found again by the next `up`)."""
    config = load_config()
    pid_file = config.home / "gateway.pid"
    if not pid_file.exists():
        click.echo("caldera: gateway not running")
        return
    pid = int(pid_file.read_text().strip() or 0)
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pid_file.unlink(missing_ok=True)
        click.echo("caldera: gateway not running (stale pid file removed)")
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            click.echo("caldera: gateway stopped")
            return
        time.sleep(0.05)
    raise click.ClickException(f"the gateway (pid {pid}) did not stop within {timeout:g} s")


@cli.command()
def status() -> None:
    """Whether the gateway runs, where, and what it holds."""
    config = load_config()
    info = _ping()
    if info is None:
        click.echo(f"caldera: gateway not running (socket {config.socket_path})")
        sys.exit(3)
    jobs = Client().get("/v1/jobs")["jobs"]
    counts: dict[str, int] = {}
    for job in jobs:
        counts[job["state"]] = counts.get(job["state"], 0) + 1
    summary = ", ".join(f"{n} {s.lower()}" for s, n in sorted(counts.items())) or "no jobs"
    click.echo(
        f"caldera: gateway running on {config.socket_path} "
        f"(cluster {info.get('cluster')}): {summary}"
    )


def shims_dir() -> Path:
    """Where the Slurm-named executables live."""
    env = os.environ.get("CALDERA_SHIMS")
    return Path(env) if env else default_home() / "shims"


def _import_roots() -> list[str]:
    """Directories that make `gateway` (and its dependencies, for the richer commands)
    importable without running site.py."""
    import site
    import sysconfig

    import gateway

    roots = [str(Path(gateway.__file__).resolve().parent.parent)]
    for path in [
        sysconfig.get_paths()["purelib"],
        sysconfig.get_paths()["platlib"],
        *site.getsitepackages(),
    ]:
        if path not in roots:
            roots.append(path)
    return roots


def write_shims(directory: Path) -> Path:
    """Create (or refresh) one executable per Slurm command in `directory`."""
    from containers.interpreter import shared_python

    directory.mkdir(parents=True, exist_ok=True)
    # marks the directory so that Caldera never runs its own shims as "the real Slurm"
    (directory / ".caldera-shims").write_text("Caldera's Slurm-named commands\n")
    for name, module in SLURM_COMMANDS.items():
        path = directory / name
        # -S: no site-packages .pth processing at start-up (it can cost 100+ ms); the
        # import roots are put on the path instead. posix._exit skips the interpreter's
        # teardown (~1.5 ms of a ~7 ms start) once the output is flushed; SIGPIPE kills the
        # command as it does Slurm's C commands.
        text = (
            f"#!{shared_python(sys.executable)} -IS\n"
            "import sys\nimport _signal\n"
            "_signal.signal(_signal.SIGPIPE, _signal.SIG_DFL)  # `squeue | head` ends quietly\n"
            f"sys.path[:0] = {_import_roots()!r}\n"
            f"from {module} import main\ncode = main()\n"
            "try:\n    sys.stdout.flush()\n    sys.stderr.flush()\n"
            "except OSError:  # a closed pipe (squeue | head): nothing more to say\n"
            "    pass\n"
            "import posix\nposix._exit(code)\n"
        )
        if not path.exists() or path.read_text() != text:
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text)
            tmp.chmod(0o755)
            tmp.replace(path)
    return directory


@cli.command()
@click.argument("directory", required=False, type=click.Path(file_okay=False))
def shims(directory: str | None) -> None:
    """Print a directory of Slurm-named executables: PATH="$(caldera shims):$PATH"."""
    click.echo(str(write_shims(Path(directory) if directory else shims_dir())))


@cli.command(context_settings=_PASS, add_help_option=False)
@click.pass_context
def agent(ctx: click.Context) -> None:
    """Run the node agent: report this node's CPUs, GPUs and RDMA ports to the gateway."""
    from node_agent.main import main as agent_main

    sys.exit(agent_main(list(ctx.args)))


@cli.command("agent-key")
@click.argument("node")
@click.option("--out", type=click.Path(file_okay=False), help="Where to put the agent's keys.")
def agent_key(node: str, out: str | None) -> None:
    """Make a key pair for NODE's agent and authorize it; print how to start the agent."""
    import shutil

    from gateway.control.agents import keys_dir
    from gateway.inventory.keys import KeyFileError, generate_keypair

    config = load_config()
    keys = keys_dir(config)
    target = Path(out) if out else keys / f"agent-{node}"
    try:
        generate_keypair(target, node)
    except KeyFileError as exc:
        raise click.ClickException(str(exc)) from exc
    (keys / "agents").mkdir(parents=True, exist_ok=True)
    shutil.copy(target / f"{node}.key", keys / "agents" / f"{node}.key")
    endpoint_file = config.home / "agents.endpoint"
    endpoint = endpoint_file.read_text().strip() if endpoint_file.exists() else "tcp://..."
    click.echo(
        f"caldera agent --name {node} --gateway {endpoint} "
        f"--key {target / (node + '.key_secret')} --server-key {keys / 'gateway.key'}"
    )


def _slurm_command(name: str, module: str) -> click.Command:

    @click.command(name=name, context_settings=_PASS, add_help_option=False)
    @click.pass_context
    def run(ctx: click.Context) -> None:
        import importlib

        mod = importlib.import_module(module)
        sys.exit(mod.main(list(ctx.args)))

    run.help = f"Slurm's {name}, on Caldera (same options and output)."
    return run


_token = _slurm_command("token", "gateway.cli.token_cmd")  # the dashboard's bearer tokens
_token.help = "Print a dashboard token for you (as `scontrol token`): SLURM_JWT=..."
cli.add_command(_token)
_why = _slurm_command("why", "gateway.cli.why_cmd")
_why.help = "Why a pending job waits: the shortfall behind its squeue reason."
cli.add_command(_why)
for _name, _module in SLURM_COMMANDS.items():
    cli.add_command(_slurm_command(_name, _module))
cli.add_command(simulate_command)  # trace replay (gateway/simulate/)


def main() -> None:
    """Console entry point."""
    cli()


if __name__ == "__main__":
    main()
