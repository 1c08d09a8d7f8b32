"""The policy at the gateway's edge: the stored PolicyState, the decayed usage, and the
last computed priority factors; sacctmgr, sshare and sprio answered from them; the
scheduling cycle's priority refresh (`refresh`, called once per cycle).

Everything here is IO and bookkeeping; the decisions are the pure functions of
`gateway.policy` (refresh.compute_priorities, jobs.accrue_usage, sacctmgr_apply...).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from gateway.model.job import Job
from gateway.model.state import JobState
from gateway.policy.config import priority_config
from gateway.policy.jobs import accrue_usage
from gateway.policy.limits import LimitGate
from gateway.policy.model import PolicyState, initial_state
from gateway.policy.preempt_rules import preempt_config
from gateway.policy.priority import BasicCounter, Factors, PriorityConfig
from gateway.policy.refresh import compute_priorities, fair_shares
from gateway.policy.sacctmgr_apply import apply_change
from gateway.policy.sacctmgr_parse import VERSION, Verb, parse_argv
from gateway.policy.sacctmgr_show import show
from gateway.policy.shares import SshareError, compute_shares, parse_sshare, render_sshare
from gateway.policy.sprio import SprioError, SprioRow, parse_sprio, render_sprio
from gateway.policy.submit_limits import check_submit
from gateway.policy.values import SacctmgrError
from gateway.store.base import StoreError

if TYPE_CHECKING:
    from gateway.control.gateway import Gateway

__all__ = ["Answer", "PolicyService", "policy_of"]

log = logging.getLogger("caldera.policy")

_BASE_TRES = ("cpu", "mem", "energy", "node", "billing", "fs/disk", "vmem", "pages")


@dataclass(frozen=True, slots=True)
class Answer:
    """What a command prints, its exit status, and (sacctmgr without -i) whether it asks
    to commit."""

    stdout: str
    stderr: str
    rc: int
    ask: bool = False


class PolicyService:
    """One gateway's accounting policy."""

    def __init__(self, gw: Gateway) -> None:
        self.gw = gw
        self.cfg: PriorityConfig = priority_config(getattr(gw.config, "priority", None))
        cluster = gw.config.cluster_name
        # a stored policy this code cannot read is left as it is, never overwritten:
        # sacctmgr says why, and priorities stay FIFO until it is repaired
        self.broken: str | None = None
        try:
            state, usage, last = gw.store.policy(cluster)
        except (ValueError, KeyError, TypeError) as exc:
            self.broken = f"{gw.store.path}: the stored accounting policy cannot be read ({exc})"
            log.error("%s", self.broken)
            state, usage, last = initial_state(cluster), {}, None
        if state is None:
            state = initial_state(cluster)
            gw.store.save_policy(state)
        self.state: PolicyState = state
        self.usage: dict[int, float] = usage
        self.usage_time: float | None = last
        self.factors: dict[int, Factors] = {}
        self.shares: dict[int, float] = {}
        self.calc_time: float | None = None
        self._count: BasicCounter | None = None  # recovered from the jobs at first use
        self._lock = asyncio.Lock()
        for gate in gw.registry.gates:  # QOS and association limits in the cycle
            if isinstance(gate, LimitGate):
                gate.bind(lambda: None if self.broken else self.state)
        from gateway.control.preemption import Preempter  # control imports this module

        cfg = gw.config
        site = preempt_config(
            {
                "preempt_type": cfg.preempt_type,
                "preempt_mode": cfg.preempt_mode,
                "preempt_exempt_time": cfg.preempt_exempt_time,
            }
        )
        self.preempter = Preempter(gw, site, lambda: None if self.broken else self.state)

    def admit(self, job: Job, retry: bool = False, operator: bool = False) -> Job:
        """The submission with its priority, or SubmitLimitError (sbatch's message) when it
        is over a submit limit: refused before it is numbered, as slurmctld's _job_create
        refuses it before set_job_prio. A retried submission is not checked: it may be
        counted already, stored under its token before its answer was lost. An operator's
        `--priority` is the job's, fixed; anyone else's is ignored (slurmctld's job_submit)."""
        if not retry and self.broken is None:
            check_submit(job, self.state, self.gw.jobs.values())
        if job.hold is not None:
            return job
        if operator and job.spec.priority:  # sbatch sends no --priority=0 (slurm_opt.c)
            return replace(job, priority=job.spec.priority, fixed_priority=True)
        return replace(job, priority=self.number(job))

    def number(self, job: Job) -> int:
        """The next number of priority/basic's count for a job submitted, released or
        resumed (under multifactor, its priority until the next refresh computes it); a
        fixed priority stays (priority_basic.c: direct_set_prio above 1)."""
        if job.fixed_priority and job.priority > 1:
            return job.priority
        if self._count is None:
            self._count = BasicCounter.recovered(
                j.priority for j in self.gw.jobs.values() if not j.fixed_priority
            )
        return self._count.take(job.spec.nice)

    async def each_cycle(self) -> None:
        """Before a cycle: end preempted jobs whose grace is over, refresh priorities."""
        await self.preempter.tick()
        await self.refresh()

    # --- commands -------------------------------------------------------------------

    async def sacctmgr(self, argv: Sequence[str], operator: bool, commit: bool) -> Answer:
        """One sacctmgr invocation; a change is stored before it is answered, and only
        when `commit` (the client's -i, or its "y" to the question)."""
        if self.broken is not None:
            return Answer("", f"sacctmgr: error: {self.broken}\n", 1)
        try:
            req = parse_argv(argv)
        except SacctmgrError as exc:
            if exc.message == VERSION:
                return Answer(exc.message + "\n", "", 0)
            return Answer("", exc.message + "\n", 1)
        if req.verb is Verb.SHOW:
            try:
                return Answer(show(self.state, req), "", 0)
            except SacctmgrError as exc:
                return Answer("", exc.message + "\n", 1)
        async with self._lock:
            outcome = apply_change(self.state, req, operator)
            if outcome.state is None or outcome.rc:
                return Answer(outcome.out, outcome.err, outcome.rc or 0)
            if not commit:
                return Answer(outcome.out, outcome.err, 0, ask=True)
            try:
                await asyncio.to_thread(self.gw.store.save_policy, outcome.state)
            except StoreError as exc:
                return Answer(outcome.out, f" Problem committing changes: {exc.cause}\n", 1)
            self.state = outcome.state
            self.calc_time = None  # shares or QOS priorities changed: recompute now
        self.gw.wake()
        return Answer(outcome.out, outcome.err, 0)

    def sshare(self, argv: Sequence[str], user: str) -> Answer:
        """sshare for the calling user."""
        try:
            opts = parse_sshare(argv)
        except SshareError as exc:
            return Answer("", f"{exc}\n", 1)
        usage = accrue_usage(
            self.usage,
            self.gw.jobs.values(),
            self.state,
            self.usage_time,
            self.gw.clock(),
            self.cfg.decay_half_life_s,
        )
        _, rows = compute_shares(self.state, usage, self.cfg)
        out = render_sshare(rows, opts, self.cfg, self.state.cluster, user, self._tres_names())
        return Answer(out, "", 0)

    def _tres_names(self) -> list[str]:
        gpus = any(n.gpus for c in self.gw.clusters.values() for n in c.nodes)
        return [*_BASE_TRES, *(["gres/gpu"] if gpus else [])]

    def sprio(self, argv: Sequence[str]) -> Answer:
        """sprio from the factors of the last refresh."""
        if not self.cfg.multifactor:
            return Answer(
                "",
                "You are not running a supported priority plugin\n(priority/basic).\n"
                "Only 'priority/multifactor' is supported.\n",
                1,
            )
        try:
            opts = parse_sprio(argv)
        except SprioError as exc:
            return Answer("", f"{exc}\n", 1)
        rows = []
        for job_id, f in self.factors.items():
            job = self.gw.jobs.get(job_id)
            if job is None or job.state is not JobState.PENDING or job.hold is not None:
                continue
            rows.append(SprioRow(f, job.partition.split(",")[0], job.user, job.uid))
        try:
            return Answer(render_sprio(rows, opts, self.cfg), "", 0)
        except SprioError as exc:
            return Answer("", f"{exc}\n", 1)

    # --- the cycle ------------------------------------------------------------------

    async def refresh(self) -> None:
        """Before a cycle orders the queue: with priority/multifactor, every
        PriorityCalcPeriod (and for jobs never computed) charge and decay usage, recompute
        fair share and every pending job's priority, and store the priorities that
        changed. priority/basic: nothing to do (submit and release set FIFO priorities)."""
        if not self.cfg.multifactor or self.broken is not None:
            return
        gw = self.gw
        now = gw.clock()
        pending = list(gw.jobs.pending.values())
        due = self.calc_time is None or now - self.calc_time >= self.cfg.calc_period_s
        stale = [j for j in pending if not self._current(j)]
        if not due and not stale:
            return
        if due:
            self.usage = accrue_usage(
                self.usage,
                gw.jobs.values(),
                self.state,
                self.usage_time,
                now,
                self.cfg.decay_half_life_s,
            )
            self.usage_time = now
            self.calc_time = now
            try:
                await asyncio.to_thread(
                    gw.store.save_policy, None, (self.state.cluster, self.usage, now)
                )
            except StoreError as exc:
                log.error("fair-share usage not stored: %s", exc)
            self.shares = fair_shares(self.state, self.usage, self.cfg)
            self.factors = compute_priorities(
                pending, self.state, self.usage, gw.schedulable(), self.cfg, now, self.shares
            )
        else:  # between calculations: only new, released or re-niced jobs (priority_p_set)
            self.factors.update(
                compute_priorities(
                    stale, self.state, self.usage, gw.schedulable(), self.cfg, now, self.shares
                )
            )
        live = {j.job_id for j in pending}
        for gone in [k for k in self.factors if k not in live]:
            del self.factors[gone]
        changed = [
            replace(j, priority=self.factors[j.job_id].priority)
            for j in pending
            if j.job_id in self.factors and j.priority != self.factors[j.job_id].priority
        ]
        if changed:
            try:
                await gw.commit(changed, "priority")
            except StoreError as exc:
                log.error("job priorities not stored: %s", exc)

    def lowered_by_user(self, job: Job) -> None:
        """A user lowered their job's priority (scontrol update, not persistent): it stands
        until the next PriorityCalcPeriod recomputes every pending job, as the
        multifactor plugin's decay thread does (priority/basic: it simply stays)."""
        f = self.factors.get(job.job_id)
        if f is not None:
            self.factors[job.job_id] = f._replace(priority=job.priority)

    def _current(self, job: Job) -> bool:
        """Whether a job's stored priority is the one last computed for it (a new job, a
        release or a nice change makes it stale)."""
        if job.hold is not None or job.fixed_priority:
            return True
        f = self.factors.get(job.job_id)
        return f is not None and f.priority == job.priority and f.nice == (job.spec.nice or 0)


_SERVICES: weakref.WeakKeyDictionary[Gateway, PolicyService] = weakref.WeakKeyDictionary()


def policy_of(gw: Gateway) -> PolicyService:
    """The gateway's policy service (made on first use: loads the stored policy)."""
    svc = _SERVICES.get(gw)
    if svc is None:
        svc = _SERVICES[gw] = PolicyService(gw)
    return svc
