"""/metrics as Prometheus reads it: every line parses whatever users put in names, the
counts are the job table's, histograms are cumulative, and the label index JobTable keeps
equals a full recount after any sequence of writes."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.api.tcp_listen import parse_listen
from gateway.control.config import ConfigError, load_config
from gateway.control.jobtable import JobTable
from gateway.metrics.collect import count_jobs, count_keys
from gateway.metrics.expo import Page, label_value
from gateway.metrics.listener import settings_from
from gateway.metrics.observe import GatewayMetrics, Histogram, route_templates
from gateway.metrics.render import MetricsInput, render
from gateway.model.job import Hold, Job, RankPlacement
from gateway.model.state import JobState, Reason
from tests.support.builders import make_cluster, make_job
from tests.support.expo_parser import ExpoError, Sample, parse_page


def _page(jobs: list[Job], observed: GatewayMetrics | None = None) -> str:
    cluster = make_cluster(nodes=2, cpus=8, memory_mb=16000, gpus=2)
    return render(
        MetricsInput(
            counts=count_jobs(jobs),
            active=[j for j in jobs if j.state.is_active],
            clusters={"local": cluster},
            free={},
            node_states={},
            observed=observed or GatewayMetrics(),
        ),
        now_mono=0.0,
    )


def _value(samples: list[Sample], name: str, **labels: str) -> float:
    found = [s.value for s in samples if s.name == name and s.labels == labels]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def test_label_values_escape_backslash_quote_and_newline_only() -> None:
    assert label_value('a"b\\c\nd') == 'a\\"b\\\\c\\nd'
    assert label_value("tab\there é 中") == "tab\there é 中"


def test_a_lone_surrogate_becomes_the_replacement_character() -> None:
    # a name that was not UTF-8, kept by surrogateescape, must not make encoding fail
    assert label_value("bad\udcff") == "bad\ufffd"
    page = _page([replace(make_job(1).build(), user="bad\udcffuser")])
    page.encode("utf-8")
    samples, _ = parse_page(page)
    assert _value(samples, "slurm_user_jobs_pending", username="bad\ufffduser") == 1


def test_the_independent_reader_rejects_what_prometheus_rejects() -> None:
    with pytest.raises(ExpoError):
        parse_page('m{a="x\ny"} 1\n')
    with pytest.raises(ExpoError):
        parse_page('m{a="x"y"} 1\n')
    with pytest.raises(ExpoError):
        parse_page('m{a="x\\t"} 1\n')


def test_counts_by_state_partition_user_account_and_reason() -> None:
    jobs = [
        replace(make_job(1).build(), user="ann", account="physics", reason=Reason.PRIORITY),
        replace(
            make_job(2).held().build(), user="ann", account="physics", reason=Reason.JOB_HELD_USER
        ),
        replace(
            make_job(3).build(),
            user="bob",
            account="chem",
            partition="debug,long",
            reason=Reason.RESOURCES,
        ),
        replace(
            make_job(4).state(JobState.RUNNING, start_time=1.0).build(),
            user="bob",
            account="chem",
            cluster="local",
            num_cpus=4,
            nodes=("n01",),
            placement=(RankPlacement("n01", 1, 4, 2000, (0,)),),
        ),
        make_job(5).state(JobState.COMPLETED).build(),
    ]
    samples, types = parse_page(_page(jobs))
    assert _value(samples, "slurm_jobs") == 5
    assert _value(samples, "slurm_jobs_pending") == 3
    assert _value(samples, "slurm_jobs_running") == 1
    assert _value(samples, "slurm_jobs_completed") == 1
    assert _value(samples, "slurm_jobs_hold") == 1
    assert _value(samples, "slurm_jobs_cpus_alloc") == 4
    assert _value(samples, "slurm_jobs_memory_alloc") == 2000 * 2**20
    assert _value(samples, "slurm_jobs_gpus_alloc") == 1
    # a job queued in two partitions waits in each
    assert _value(samples, "slurm_partition_jobs_pending", cluster="local", partition="long") == 1
    assert _value(samples, "slurm_partition_jobs_pending", cluster="local", partition="debug") == 3
    assert _value(samples, "slurm_partition_jobs_running", cluster="local", partition="debug") == 1
    assert (
        _value(samples, "slurm_partition_jobs_cpus_alloc", cluster="local", partition="debug") == 4
    )
    assert _value(samples, "slurm_partition_cpus", cluster="local", partition="debug") == 16
    assert _value(samples, "slurm_partition_gpus", cluster="local", partition="debug") == 4
    assert _value(samples, "slurm_user_jobs_pending", username="ann") == 2
    assert _value(samples, "slurm_user_jobs_hold", username="ann") == 1
    assert _value(samples, "slurm_account_jobs_running", account="chem") == 1
    assert (
        _value(
            samples,
            "caldera_pending_jobs",
            cluster="local",
            partition="debug,long",
            reason="Resources",
        )
        == 1
    )
    assert (
        _value(
            samples,
            "caldera_pending_jobs",
            cluster="local",
            partition="debug",
            reason="JobHeldUser",
        )
        == 1
    )
    detail = [s for s in samples if s.name == "caldera_jobs"]
    assert sum(s.value for s in detail) == 5  # each job once, whatever its partitions
    assert types["slurm_jobs_pending"] == "gauge"
    assert types["caldera_submit_duration_seconds"] == "histogram"


def test_histograms_are_cumulative_with_an_inf_bucket_equal_to_the_count() -> None:
    h = Histogram((0.1, 1.0))
    for v in (0.05, 0.1, 0.5, 3.0):
        h.observe(v)
    assert h.cumulative() == [2, 3]
    obs = GatewayMetrics()
    obs.observe_submit(0.002, accepted=True)
    obs.observe_submit(0.3, accepted=True)
    obs.observe_submit(0.001, accepted=False)
    samples, _ = parse_page(_page([], obs))
    name = "caldera_submit_duration_seconds"
    assert _value(samples, f"{name}_bucket", result="accepted", le="0.0025") == 1
    assert _value(samples, f"{name}_bucket", result="accepted", le="+Inf") == 2
    assert _value(samples, f"{name}_count", result="accepted") == 2
    assert _value(samples, f"{name}_sum", result="accepted") == pytest.approx(0.302)
    assert _value(samples, f"{name}_count", result="rejected") == 1
    assert _value(samples, "slurm_sdiag_jobs_submitted") == 2


def test_job_changes_count_starts_with_their_wait_and_ends() -> None:
    obs = GatewayMetrics()
    pending = replace(make_job(1).build(), submit_time=100.0)
    running = replace(pending, state=JobState.RUNNING, start_time=130.0, cluster="c1")
    obs.job_changed(None, pending)
    obs.job_changed(pending, running)
    obs.job_changed(running, running)  # the same run again (a reason or step update)
    obs.job_changed(running, replace(running, state=JobState.COMPLETED, end_time=140.0))
    assert obs.started == 1
    assert obs.admission_wait["c1"].count == 1
    assert obs.admission_wait["c1"].total == 30.0
    assert obs.ended == {JobState.COMPLETED: 1}


def test_api_routes_are_told_apart_and_anything_else_is_other() -> None:
    obs = GatewayMetrics()
    obs.api_routes = route_templates(["/v1/jobs/{job_id}", "/v1/jobs/signal", "/metrics"])
    assert obs.route_of("/v1/jobs/123") == "/v1/jobs/{id}"
    assert obs.route_of("/v1/jobs/signal") == "/v1/jobs/signal"
    assert obs.route_of("/v1/jobs/../../etc/passwd") == "other"
    assert obs.route_of("/random/" + "x" * 50) == "other"


_ANY_TEXT = st.text(
    st.characters(blacklist_categories=("Cs",))
    | st.sampled_from(['"', "\\", "\n", "\r", "\udcff"]),
    max_size=24,
)


@given(users=st.lists(_ANY_TEXT, min_size=1, max_size=6), accounts=st.lists(_ANY_TEXT, max_size=3))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_no_user_or_account_name_breaks_a_line(users: list[str], accounts: list[str]) -> None:
    jobs = []
    for i, user in enumerate(users):
        account = accounts[i % len(accounts)] if accounts else ""
        name = user + "-job"
        job = make_job(i + 1).name(name).build()
        jobs.append(replace(job, user=user, account=account, reason=Reason.PRIORITY))
    page = _page(jobs)
    page.encode("utf-8")
    samples, _ = parse_page(page)
    got = {s.labels["username"]: s.value for s in samples if s.name == "slurm_user_jobs_pending"}
    want: dict[str, int] = {}
    for user in users:
        key = user.replace("\udcff", "\ufffd")
        want[key] = want.get(key, 0) + 1
    assert got == want
    assert _value(samples, "slurm_jobs_pending") == len(users)


@given(
    ops=st.lists(
        st.tuples(
            st.integers(1, 12),
            st.sampled_from([JobState.PENDING, JobState.RUNNING, JobState.COMPLETED, None]),
            st.sampled_from(["u1", "u2"]),
            st.booleans(),
        ),
        max_size=60,
    )
)
@settings(max_examples=100, deadline=None)
def test_the_label_index_equals_a_full_recount_after_any_writes(
    ops: list[tuple[int, JobState | None, str, bool]],
) -> None:
    table = JobTable()
    for job_id, state, user, held in ops:
        if state is None:
            table.pop(job_id)
            continue
        job = replace(make_job(job_id).build(), state=state, user=user)
        table[job_id] = replace(job, hold=Hold.USER) if held else job
    assert count_keys(table.label_counts) == count_jobs(table.values())


def test_a_family_is_declared_once_and_names_are_checked() -> None:
    page = Page()
    page.gauge("a_total", "doc", (), [((), 1)])
    with pytest.raises(ValueError, match="repeated"):
        page.gauge("a_total", "doc", (), [((), 1)])
    with pytest.raises(ValueError, match="bad"):
        page.gauge("9lives", "doc", (), [])
    with pytest.raises(ValueError, match="label"):
        page.gauge("b", "doc", ("__name__",), [])


@pytest.mark.skipif(shutil.which("promtool") is None, reason="testenv/metrics/install.sh")
def test_promtool_accepts_the_page() -> None:
    jobs = [replace(make_job(i).build(), user=f'us"er\n{i}', account="a\\b") for i in range(1, 5)]
    proc = subprocess.run(
        ["promtool", "check", "metrics"],
        input=_page(jobs),
        capture_output=True,
        text=True,
        check=False,
    )
    # exit 1 is a parse error; 3 would be lint advice about names (Slurm's own are kept)
    assert proc.returncode in (0, 3), proc.stdout + proc.stderr
    assert "error while linting" not in proc.stdout + proc.stderr


def test_names_equal_once_made_utf8_are_one_series() -> None:
    jobs = [
        replace(make_job(1).build(), user="a\udcff"),
        replace(make_job(2).build(), user="a\ufffd"),
    ]
    samples, _ = parse_page(_page(jobs))
    assert _value(samples, "slurm_user_jobs_pending", username="a\ufffd") == 2


def test_the_grafana_dashboard_names_only_metrics_the_page_has() -> None:
    dashboard = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "caldera.json"
    doc = json.loads(dashboard.read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]
    _, types = parse_page(_page([make_job(1).build()]))
    used = {
        re.sub(r"_(bucket|count|sum)$", "", name)
        for e in exprs
        for name in re.findall(r"\b((?:slurm|caldera)_[a-z_]+)", e)
    }
    assert used, exprs
    assert used <= set(types), used - set(types)


def test_the_metrics_table_is_checked_and_off_by_default(tmp_path: Path) -> None:
    home = tmp_path
    assert settings_from(load_config(home)).listen is None
    (home / "caldera.toml").write_text('[metrics]\nlisten = "[::1]:9464"\n')
    assert settings_from(load_config(home)).listen == ("::1", 9464)
    (home / "caldera.toml").write_text('[metrics]\nlisten = "9464"\n')
    with pytest.raises(ConfigError, match="host:port"):
        settings_from(load_config(home))
    (home / "caldera.toml").write_text('[metrics]\nlisen = "127.0.0.1:9464"\n')
    with pytest.raises(ConfigError, match="lisen"):
        settings_from(load_config(home))
    with pytest.raises(ValueError, match="out of range"):
        parse_listen("127.0.0.1:70000")


def test_agent_report_age_follows_the_registry_clock() -> None:
    from gateway.inventory.messages import Inventory
    from gateway.inventory.registry import NodeRegistry

    clock = [100.0]
    registry = NodeRegistry(period_s=1.0, missed=3, clock=lambda: clock[0])
    registry.report_inventory(Inventory(node="gpu01", cpus=4, memory_bytes=2**30))
    obs = GatewayMetrics()
    obs.agents = registry
    clock[0] = 102.5
    samples, _ = parse_page(
        render(
            MetricsInput(
                counts=count_jobs([]),
                active=[],
                clusters={},
                free={},
                node_states={},
                observed=obs,
            ),
            now_mono=clock[0],
        )
    )
    assert _value(samples, "caldera_agent_report_age_seconds", node="gpu01") == 2.5
    assert _value(samples, "caldera_agent_up", node="gpu01") == 1
