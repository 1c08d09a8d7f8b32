"""What the gateway observed, as /metrics families: scheduling cycles (Kueue's
admission-attempt histogram, and slurmctld's sdiag gauges in microseconds), submissions,
queue waits, API requests, routing decisions, agent report ages, and the page's own
render time.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.metrics.expo import Page
from gateway.metrics.observe import GatewayMetrics, Histogram
from gateway.model.state import JobState

__all__ = ["observed_families"]


def _histograms(
    page: Page, name: str, doc: str, label: str, series: Mapping[str, Histogram]
) -> None:
    page.histogram(
        name,
        doc,
        (label,),
        {(k,): (h.bounds, h.cumulative(), h.total, h.count) for k, h in sorted(series.items())},
    )


def observed_families(page: Page, obs: GatewayMetrics, now_mono: float) -> None:
    """Scheduler, submission, queue-wait, API and agent families."""
    _histograms(
        page,
        "caldera_admission_attempt_duration_seconds",
        "Duration of a scheduling cycle (success: it started a job)",
        "result",
        obs.cycles,
    )
    page.gauge(
        "caldera_admission_attempts_total",
        "Scheduling cycles run (success: it started a job)",
        ("result",),
        (((k,), h.count) for k, h in sorted(obs.cycles.items())),
        kind="counter",
    )
    us = 1_000_000
    mean = obs.cycle_total_s / obs.cycle_count if obs.cycle_count else 0.0
    for name, doc, value in (
        ("slurm_schedule_cycle_cnt", "Scheduling cycle count", obs.cycle_count),
        (
            "slurm_schedule_cycle_last",
            "Last scheduling cycle time (microseconds)",
            round(obs.cycle_last_s * us),
        ),
        (
            "slurm_schedule_cycle_max",
            "Max scheduling cycle time (microseconds)",
            round(obs.cycle_max_s * us),
        ),
        (
            "slurm_schedule_cycle_tot",
            "Sum of scheduling cycle times (microseconds)",
            round(obs.cycle_total_s * us),
        ),
        ("slurm_sched_mean_cycle", "Mean scheduling cycle time (microseconds)", round(mean * us)),
        (
            "slurm_schedule_queue_len",
            "Jobs pending queue length (at the last cycle)",
            obs.queue_len,
        ),
        (
            "slurm_sdiag_jobs_submitted",
            "Jobs submitted since the gateway started",
            obs.submits["accepted"].count if "accepted" in obs.submits else 0,
        ),
        ("slurm_sdiag_jobs_started", "Jobs started since the gateway started", obs.started),
        (
            "slurm_sdiag_jobs_completed",
            "Jobs completed since the gateway started",
            obs.ended.get(JobState.COMPLETED, 0),
        ),
        (
            "slurm_sdiag_jobs_canceled",
            "Jobs canceled since the gateway started",
            obs.ended.get(JobState.CANCELLED, 0),
        ),
        (
            "slurm_sdiag_jobs_failed",
            "Jobs failed since the gateway started",
            obs.ended.get(JobState.FAILED, 0),
        ),
    ):
        page.gauge(name, doc, (), [((), value)])
    _histograms(
        page,
        "caldera_submit_duration_seconds",
        "Duration of sbatch submissions in the gateway: parsing to durable store (accepted) "
        "or to refusal",
        "result",
        obs.submits,
    )
    _histograms(
        page,
        "caldera_admission_wait_time_seconds",
        "Time from eligibility (or submission) to start, of the jobs started",
        "cluster",
        obs.admission_wait,
    )
    page.histogram(
        "caldera_api_request_duration_seconds",
        "Duration of API requests by method and route",
        ("method", "route"),
        {k: (h.bounds, h.cumulative(), h.total, h.count) for k, h in sorted(obs.api.items())},
    )
    _routing(page, obs)
    records = obs.agents.records() if obs.agents is not None else {}
    names = sorted(records)
    page.gauge(
        "caldera_agent_report_age_seconds",
        "Seconds since the node's agent last reported (inventory or heartbeat)",
        ("node",),
        (((n,), round(max(0.0, now_mono - records[n].last_seen), 3)) for n in names),
    )
    page.gauge(
        "caldera_agent_up",
        "1 while the node's agent reports, 0 once it missed its heartbeats",
        ("node",),
        (((n,), int(records[n].up)) for n in names),
    )
    page.gauge(
        "caldera_metrics_render_seconds",
        "Time the previous /metrics page took to render",
        (),
        [((), round(obs.render_s, 6))],
    )


def _routing(page: Page, obs: GatewayMetrics) -> None:
    """The router's decisions (gateway/control/routing.py), counted as they are made."""
    page.gauge(
        "caldera_routing_decisions_total",
        "Routing decisions by the cluster chosen and what they did (home, burst to another "
        "cluster, stay where routed, none: no cluster could predict a start)",
        ("cluster", "kind"),
        sorted(obs.routes.items()),
        kind="counter",
    )
    page.gauge(
        "caldera_routing_moves_total",
        "Jobs withdrawn from one cluster's own queue and routed to another (revocations)",
        ("from", "to"),
        sorted(obs.moves.items()),
        kind="counter",
    )
    page.gauge(
        "caldera_preemptions_total",
        "Runs of jobs ended for a preemptor, by cluster and PreemptMode (cancel, requeue)",
        ("cluster", "mode"),
        sorted(obs.preemptions.items()),
        kind="counter",
    )
    page.histogram(
        "caldera_routing_prediction_error_seconds",
        "How far a routed job's start was from the start predicted when it was routed there "
        "(late: it started after the prediction, early: before)",
        ("cluster", "direction"),
        {
            k: (h.bounds, h.cumulative(), h.total, h.count)
            for k, h in sorted(obs.prediction_error.items())
        },
    )
    page.gauge(
        "caldera_routing_waiting_jobs",
        "Pending jobs not routed yet because a cluster's start prediction is being asked",
        (),
        [((), obs.route_waiting)],
    )
