"""--signal's warning as slurmctld 22.05 times it: job_time_limit() runs every
PERIODIC_TIMEOUT (30 s, controller.c) and send_job_warn_signal sends the signal at the
first such check where `warn_time + PERIODIC_TIMEOUT + now >= end_time`. So a lead beyond
the limit (`--signal B:USR1@300` with `-t 1`) is due at once but waits for the next check:
on the test cluster the corpus's short jobs (xcore-pilot, variable-time-jobs.sh) ended
before it and were never signalled. Three `-t 1 --signal=B:USR1@300` jobs started there at
...849.51, ...856.48 and ...863.46 (epoch seconds) all got USR1 at one check, ...867.44, ...867.49
and ...867.46; a job of half a second got none. slurmctld's checks keep the phase of its own
start; Caldera's fall on multiples of the period since the epoch, one clock for every job
as well."""

from __future__ import annotations

from containers.step_rules import warning_time


def test_a_lead_beyond_the_limit_waits_for_the_next_periodic_check() -> None:
    start = 1000.2
    assert warning_time(start + 60, 300, 30, start) == 1020.0  # 19.8 s after the start


def test_a_lead_within_the_limit_is_sent_at_the_first_check_close_enough() -> None:
    # checks at ..., 1890 (end 110 s away: too soon), 1920 (80 s away <= 60 + 30)
    assert warning_time(2000, 60, 30, 1000) == 1920.0
    assert warning_time(2010, 60, 30, 1000) == 1920.0  # exactly lead + period away


def test_checks_keep_their_grid_after_a_resume_or_a_new_limit() -> None:
    assert warning_time(2000, 60, 30, 1925.5) == 1950.0  # not before now, on the grid


def test_time_scale_shrinks_the_period_with_the_limit() -> None:
    # time_scale 1/60: -t 2 is 2 s, USR1@60 leads by 1 s, checks every 0.5 s
    assert warning_time(100.3 + 2, 1, 0.5, 100.3) == 101.0
    assert warning_time(7.0, 1.0, 0.0, 2.0) == 6.0  # no period: exactly lead before
