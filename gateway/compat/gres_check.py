"""sbatch's check of a job's GRES request (`gres_job_state_validate`, Slurm 22.05).

Before submitting, sbatch builds the job's TRES strings and validates them together with
the task, node, socket and CPU counts. The check may fill in counts the request implies
(`--gpus=4 --gpus-per-node=2` asks for exactly 2 nodes, `--ntasks-per-gpu=2 --gpus=2`
for 4 tasks, `--cpus-per-gpu=2 --gpus-per-task=2` for 4 CPUs per task) and refuses
inconsistent requests with Slurm's own lines. slurmctld runs the same check; with
`--clusters` only slurmctld does, and its refusal reads differently.

`None` stands for Slurm's NO_VAL (not requested).
"""

from __future__ import annotations

from typing import NamedTuple

from gateway.compat.errors import CompatError, Diagnostic, Level
from gateway.compat.gres import parse_tres_item
from gateway.model.values import GresItem

__all__ = ["GresCounts", "GresRequest", "check_gres", "check_tres_strings"]

_INVALID_GRES = "Invalid generic resource (gres) specification"
_INVALID_GRES_TYPE = "Invalid GRES specification (with and without type identification)"
_INVALID_TRES = "Invalid Trackable RESource (TRES) specification"
_SHARED = frozenset({"mps", "shard"})  # GRES that share a GPU (gres_id_shared)
_SHARING = frozenset({"gpu"})  # GRES that others share (gres_id_sharing)


class GresCounts:
    """The job descriptor's counts that the check reads and may set (None: NO_VAL)."""

    __slots__ = (
        "cpus_per_task",
        "max_nodes",
        "min_nodes",
        "ntasks_per_node",
        "ntasks_per_socket",
        "ntasks_per_tres",
        "num_tasks",
        "sockets_per_node",
    )

    def __init__(
        self,
        num_tasks: int | None,
        min_nodes: int | None,
        max_nodes: int | None,
        ntasks_per_node: int | None,
        ntasks_per_socket: int | None,
        sockets_per_node: int | None,
        cpus_per_task: int | None,
        ntasks_per_tres: int | None,
    ) -> None:
        self.num_tasks = num_tasks
        self.min_nodes = min_nodes
        self.max_nodes = max_nodes
        self.ntasks_per_node = ntasks_per_node
        self.ntasks_per_socket = ntasks_per_socket
        self.sockets_per_node = sockets_per_node
        self.cpus_per_task = cpus_per_task
        self.ntasks_per_tres = ntasks_per_tres


class GresRequest(NamedTuple):
    """A job's TRES request as sbatch sends it."""

    per_job: tuple[GresItem, ...] = ()
    per_node: tuple[GresItem, ...] = ()
    per_socket: tuple[GresItem, ...] = ()
    per_task: tuple[GresItem, ...] = ()
    cpus_per_gpu: int | None = None
    mem_per_gpu_mb: int | None = None
    per_node_has_empty_item: bool = False  # `--gres=a,,b` (slurmctld refuses the TRES)

    def requests_anything(self) -> bool:
        """Whether there is anything to check."""
        return bool(
            self.per_job
            or self.per_node
            or self.per_socket
            or self.per_task
            or self.cpus_per_gpu is not None
            or self.mem_per_gpu_mb is not None
        )


class _Rec:
    """One job GRES record (gres_job_state_t): per-name-and-type counts."""

    __slots__ = (
        "cpus_per_gres",
        "gres_per_job",
        "gres_per_node",
        "gres_per_socket",
        "gres_per_task",
        "mem_per_gres",
        "name",
        "ntasks_per_gres",
        "total_gres",
        "type",
    )

    def __init__(self, name: str, gtype: str | None) -> None:
        self.name = name
        self.type = gtype
        self.cpus_per_gres = 0
        self.gres_per_job = 0
        self.gres_per_node = 0
        self.gres_per_socket = 0
        self.gres_per_task = 0
        self.mem_per_gres = 0
        self.total_gres = 0
        self.ntasks_per_gres: int | None = None


class _State:
    """The records of one check, and the site's GRES names."""

    __slots__ = ("names", "recs")

    def __init__(self, names: tuple[str, ...] | None) -> None:
        self.names = names
        self.recs: list[_Rec] = []

    def rec(self, item: GresItem) -> _Rec | None:
        """`_get_next_job_gres`: the record of an item; None for a zero count."""
        if item.count == 0:
            return None
        if item.name == "" or (self.names is not None and item.name not in self.names):
            raise _Invalid
        for r in self.recs:
            if r.name == item.name and r.type == item.type:
                return r
        r = _Rec(item.name, item.type)
        self.recs.append(r)
        return r


class _Invalid(Exception):
    def __init__(self, *lines: str, text: str = _INVALID_GRES) -> None:
        super().__init__(text)
        self.lines = lines
        self.text = text


def _items(tokens: list[str]) -> list[GresItem]:
    out = []
    for tok in tokens:
        item = parse_tres_item(tok)
        if item is None:
            raise _Invalid
        out.append(item)
    return out


def _max(a: int, b: int) -> int:
    return a if a > b else b


def _load(req: GresRequest, c: GresCounts, st: _State) -> bool:
    """Build the records; returns whether a GPU was requested."""
    gpu = False
    if req.cpus_per_gpu is not None:
        for item in _items([f"gpu:{req.cpus_per_gpu}"]):
            if (r := st.rec(item)) is not None:
                r.cpus_per_gres = item.count
                r.ntasks_per_gres = c.ntasks_per_tres
    for items, kind in (
        (req.per_job, "job"),
        (req.per_node, "node"),
        (req.per_socket, "socket"),
        (req.per_task, "task"),
    ):
        for item in items:
            r = st.rec(item)
            if r is None:
                continue
            gpu = gpu or item.name == "gpu"
            cnt = item.count
            if kind == "job":
                r.gres_per_job = cnt
            elif kind == "node":
                r.gres_per_node = cnt
                if c.min_nodes is not None:
                    cnt *= c.min_nodes
            elif kind == "socket":
                r.gres_per_socket = cnt
                if c.min_nodes is not None and c.sockets_per_node is not None:
                    cnt *= c.min_nodes * c.sockets_per_node
                elif c.num_tasks is not None and c.ntasks_per_socket is not None:
                    cnt *= -(-c.num_tasks // c.ntasks_per_socket)
            else:
                r.gres_per_task = cnt
                if c.num_tasks is not None:
                    cnt *= c.num_tasks
            r.total_gres = _max(r.total_gres, cnt)
            r.ntasks_per_gres = c.ntasks_per_tres
    if req.mem_per_gpu_mb is not None:
        for item in _items([f"gpu:{req.mem_per_gpu_mb}"]):
            if (r := st.rec(item)) is not None:
                r.mem_per_gres = item.count
                r.ntasks_per_gres = c.ntasks_per_tres
    return gpu


def _ntasks_per_tres(c: GresCounts, st: _State, gpu: bool) -> bool:
    n = c.ntasks_per_tres
    if not n:
        return gpu
    if gpu and st.recs:
        totals = [r.total_gres for r in st.recs if r.name == "gpu" and r.total_gres]
        if not totals:
            raise _Invalid(
                "gres_job_state_validate: Can't set num_tasks = gpus * *ntasks_per_tres "
                "because there are no allocated GPUs"
            )
        c.num_tasks = sum(totals) * n
        return gpu
    if c.num_tasks:
        item = GresItem("gpu", None, c.num_tasks // n)
        r = st.rec(item)
        if r is not None:
            r.ntasks_per_gres = n
            r.gres_per_job = item.count
            r.total_gres = _max(r.total_gres, item.count)
        return r is not None or gpu
    raise _Invalid(
        "gres_job_state_validate: --ntasks-per-tres needs either a GRES GPU specification "
        "or a node/ntask specification"
    )


def _test_counts(r: _Rec, c: GresCounts, client: bool) -> None:
    """`_test_gres_cnt` for one record."""
    n = r.name
    if r.gres_per_job and (
        (r.gres_per_node and r.gres_per_node > r.gres_per_job)
        or (r.gres_per_task and r.gres_per_task > r.gres_per_job)
        or (r.gres_per_socket and r.gres_per_socket > r.gres_per_job)
    ):
        raise _Invalid(
            f"Failed to ensure --{n}s >= --gres={n}/--{n}s-per-node >= --{n}s-per-socket"
        )
    if r.gres_per_node and (
        (r.gres_per_task and r.gres_per_task > r.gres_per_node)
        or (r.gres_per_socket and r.gres_per_socket > r.gres_per_node)
    ):
        raise _Invalid(f"Failed to ensure --{n}s >= --{n}s-per-task")
    if r.gres_per_socket and c.sockets_per_node is None:
        raise _Invalid(f"--{n}s-per-socket option requires --sockets-per-node specification")
    if client and r.cpus_per_gres and c.cpus_per_task is not None:
        raise _Invalid(f"--cpus-per-{n} is mutually exclusive with --cpus-per-task")
    if r.gres_per_job and r.gres_per_node:
        if r.gres_per_job % r.gres_per_node:
            raise _Invalid(
                f"Failed to validate job spec, --{n}s is not multiple of --gres={n}/--{n}s-per-node"
            )
        req_nodes = r.gres_per_job // r.gres_per_node
        if (c.min_nodes is not None and req_nodes < c.min_nodes) or (
            c.max_nodes is not None and req_nodes > c.max_nodes
        ):
            raise _Invalid(
                f"Failed to validate job spec. Based on --{n} and --gres={n}/--{n}s-per-node "
                f"required nodes ({req_nodes}) doesn't fall between min_nodes "
                f"({_u32(c.min_nodes)}) and max_nodes ({_u32(c.max_nodes)}) boundaries."
            )
        c.min_nodes = c.max_nodes = req_nodes
    if r.gres_per_node and r.gres_per_socket:
        if r.gres_per_node % r.gres_per_socket:
            raise _Invalid(
                f"Failed to validate job spec, --gres={n}/--{n}s-per-node not multiple of "
                f"--{n}s-per-socket."
            )
        req_sockets = r.gres_per_node // r.gres_per_socket
        if c.sockets_per_node is None:
            c.sockets_per_node = req_sockets
        elif c.sockets_per_node != req_sockets:
            raise _Invalid(
                f"Failed to validate job spec. Based on --gres={n}/--{n}s-per-node and "
                f"--{n}s-per-socket required number of sockets differ from --sockets-per-node."
            )
    per_gres = r.ntasks_per_gres
    if per_gres and c.num_tasks is not None and c.num_tasks % per_gres:
        raise _Invalid(
            f"Failed to validate job spec, -n/--ntasks has to be a multiple of --ntasks-per-{n}."
        )
    if r.gres_per_task:
        if r.gres_per_job:
            if r.gres_per_job % r.gres_per_task:
                raise _Invalid(
                    f"Failed to validate job spec, --{n}s not multiple of --{n}s-per-task"
                )
            req_tasks = r.gres_per_job // r.gres_per_task
            if c.num_tasks is None:
                c.num_tasks = req_tasks
            elif c.num_tasks != req_tasks:
                raise _Invalid(
                    f"Failed to validate job spec. Based on --{n}s and --{n}s-per-task number "
                    "of requested tasks differ from -n/--ntasks."
                )
        elif c.num_tasks is not None:
            r.gres_per_job = c.num_tasks * r.gres_per_task
        else:
            raise _Invalid(
                f"Failed to validate job spec. --{n}s-per-task used without either --{n}s "
                "or -n/--ntasks is not allowed."
            )
    if r.gres_per_node and r.gres_per_task:
        if r.gres_per_node % r.gres_per_task:
            raise _Invalid(
                f"Failed to validate job spec, --gres={n}/--{n}s-per-node not multiple of "
                f"--{n}s-per-task."
            )
        per_node = r.gres_per_node // r.gres_per_task
        if not c.ntasks_per_node:
            c.ntasks_per_node = per_node
        elif c.ntasks_per_node != per_node:
            raise _Invalid(
                f"Failed to validate job spec. Based on --gres={n}/--{n}s-per-node and "
                f"--{n}s-per-task requested number of tasks per node differ from "
                "--ntasks-per-node."
            )
    if r.gres_per_socket and r.gres_per_task:
        if r.gres_per_socket % r.gres_per_task:
            raise _Invalid(
                f"Failed to validate job spec, --{n}s-per-socket not multiple of --{n}s-per-task."
            )
        per_socket = r.gres_per_socket // r.gres_per_task
        if not c.ntasks_per_socket:
            c.ntasks_per_socket = per_socket
        elif c.ntasks_per_socket != per_socket:
            raise _Invalid(
                f"Failed to validate job spec. Based on --{n}s-per-socket and "
                f"--{n}s-per-task requested number of tasks per sockets differ from "
                "--ntasks-per-socket."
            )
    if r.cpus_per_gres and r.gres_per_task:
        cpus = r.cpus_per_gres * r.gres_per_task
        if not c.cpus_per_task:
            c.cpus_per_task = cpus
        elif c.cpus_per_task != cpus:
            raise _Invalid(
                f"Failed to validate job spec. Based on --cpus-per-{n} and --{n}s-per-task "
                "requested number of cpus differ from -c/--cpus-per-task."
            )
    if r.gres_per_job:
        if c.min_nodes is not None and r.gres_per_job < c.min_nodes:
            raise _Invalid(f"Failed to validate job spec, --{n}s < -N")
        if c.max_nodes is not None and r.gres_per_job < c.max_nodes:
            c.max_nodes = r.gres_per_job


def _u32(value: int | None) -> int:
    return 0xFFFF_FFFE if value is None else value


def _overlap(st: _State) -> None:
    """`_set_over_list` and `_merge_generic_data`: an untyped record next to typed ones of
    the same GRES may only carry per-GRES CPUs or memory."""
    for r in st.recs:
        if r.type is not None:
            continue
        typed = any(o.name == r.name and o.type is not None for o in st.recs)
        if typed and (r.gres_per_job or r.gres_per_node or r.gres_per_socket or r.gres_per_task):
            raise _Invalid(text=_INVALID_GRES_TYPE)


def _validate(req: GresRequest, c: GresCounts, st: _State, client: bool) -> None:
    if (req.per_task or c.ntasks_per_tres is not None) and (
        c.num_tasks is None and c.min_nodes is not None and c.min_nodes == c.max_nodes
    ):
        if c.ntasks_per_tres is not None:
            c.num_tasks = c.min_nodes * c.ntasks_per_tres
        elif c.ntasks_per_node is not None:
            c.num_tasks = c.min_nodes * c.ntasks_per_node
        elif c.cpus_per_task is None:
            c.num_tasks = c.min_nodes
    gpu = _load(req, c, st)
    gpu = _ntasks_per_tres(c, st, gpu)
    if not st.recs:
        return
    if req.mem_per_gpu_mb is not None and not gpu:
        raise _Invalid(
            f"Requested mem_per_tres=gres:gpu:{req.mem_per_gpu_mb} but did not request any GPU."
        )
    sharing = shared = False
    for r in st.recs:
        _test_counts(r, c, client)
        sharing = sharing or r.name in _SHARING
        if r.name in _SHARED:
            shared = True
            if (
                (r.gres_per_job and c.max_nodes != 1)
                or (r.gres_per_socket and c.sockets_per_node != 1)
                or (r.gres_per_task and c.num_tasks != 1)
            ):
                raise _Invalid
        if sharing and shared:
            raise _Invalid
    _overlap(st)


def check_gres(
    req: GresRequest,
    counts: GresCounts,
    names: tuple[str, ...] | None,
    *,
    by_controller: bool = False,
) -> GresCounts:
    """Validate a request; returns the counts it implies, or raises CompatError (exit 1).

    `names` are the site's GRES names (None: accept any). `by_controller` is the check
    slurmctld makes for `--clusters` jobs: one line, `Batch job submission failed: ...`.
    """
    if not req.requests_anything() and counts.ntasks_per_tres is None:
        return counts
    st = _State(names)
    try:
        _validate(req, counts, st, client=not by_controller)
    except _Invalid as exc:
        if by_controller:
            raise CompatError.error(f"Batch job submission failed: {exc.text}", 1) from None
        lines = [Diagnostic(Level.ERROR, line) for line in (*exc.lines, exc.text)]
        raise CompatError(*lines, exit_code=1) from None
    return counts


def check_tres_strings(req: GresRequest) -> None:
    """slurmctld's `valid_tres_cnt` for what the GRES check lets through."""
    if req.per_node_has_empty_item:
        raise CompatError.error(f"Batch job submission failed: {_INVALID_TRES}", 1)
