"""The policy in the store (schema 5) and the [priority] table: a change survives a
reopen, an old store is migrated with its jobs, usage and its decay clock are kept, a bad
setting is refused with its name."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from gateway.control.config import ConfigError, load_config
from gateway.policy.config import priority_config
from gateway.store.base import Submission
from gateway.store.sqlite import SqliteStore
from tests.support.builders import make_job
from tests.support.policy_env import run, seeded


def test_policy_and_usage_survive_a_reopen(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    store = SqliteStore(db)
    assert store.policy("caldera") == (None, {}, None)
    state, _, rc = run(seeded(), ["-i", "add", "qos", "high", "priority=9", "MaxWall=1:00:00"])
    assert rc == 0
    store.save_policy(state, ("caldera", {5: 12.5}, 1000.0))
    store.close()
    again = SqliteStore(db)
    assert again.policy("caldera") == (state, {5: 12.5}, 1000.0)
    assert again.policy("other") == (None, {}, None)


def test_a_schema_4_store_is_migrated_to_5_and_keeps_its_jobs(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    store = SqliteStore(db)
    store.insert([Submission(make_job(1).build(), "#!/bin/sh\n", {})])
    store.close()
    conn = sqlite3.connect(db)
    for table in ("policy", "policy_usage", "policy_decay"):
        conn.execute(f"DROP TABLE {table}")
    conn.execute("UPDATE meta SET value='4' WHERE key='schema'")
    conn.commit()
    conn.close()
    migrated = SqliteStore(db)
    assert migrated._rows("SELECT value FROM meta WHERE key='schema'") == [("5",)]
    assert [j.job_id for j in migrated.active()] == [1]
    migrated.save_policy(seeded())
    assert migrated.policy("caldera")[0] == seeded()


def test_priority_table_reads_slurm_conf_names() -> None:
    cfg = priority_config(
        {
            "PriorityType": "priority/multifactor",
            "PriorityWeightAge": 1000,
            "PriorityWeightTRES": "CPU=1000,Mem=2000,GRES/gpu=3000",
            "PriorityMaxAge": "14-0",
            "PriorityDecayHalfLife": "7-0",
            "PriorityCalcPeriod": 1,
            "PriorityFlags": "NO_FAIR_TREE,SMALL_RELATIVE_TO_TIME,NO_NORMAL_ALL",
            "FairShareDampeningFactor": 2,
        }
    )
    assert cfg.multifactor
    assert not cfg.fair_tree
    assert cfg.small_relative_to_time
    assert cfg.no_normal_qos
    assert cfg.no_normal_part
    assert cfg.max_age_s == 14 * 86400
    assert cfg.decay_half_life_s == 7 * 86400
    assert cfg.calc_period_s == 60
    assert dict(cfg.weight_tres) == {"cpu": 1000.0, "mem": 2000.0, "gres/gpu": 3000.0}
    assert cfg.dampening == 2
    assert not priority_config(None).multifactor


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"PriorityType": "priority/fifo"}, "PriorityType: priority/basic or"),
        ({"PriorityWeightAge": -1}, "PriorityWeightAge: must be an integer"),
        ({"PriorityWeightQOS": 2**32}, "PriorityWeightQOS: must be an integer"),
        ({"PriorityMaxAge": "soon"}, "PriorityMaxAge: invalid time"),
        ({"PriorityFlags": "FAST"}, "PriorityFlags: unknown flag 'FAST'"),
        ({"PriorityWeightTRES": "CPU"}, "PriorityWeightTRES: bad weight 'CPU'"),
        ({"PriorityWeigthAge": 1}, "PriorityWeigthAge: unknown setting"),
    ],
)
def test_bad_priority_settings_are_named(table: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        priority_config(table)


def test_caldera_toml_refuses_a_bad_priority_table(tmp_path: Path) -> None:
    (tmp_path / "caldera.toml").write_text('[priority]\nPriorityWeightAge = "lots"\n')
    with pytest.raises(ConfigError, match="PriorityWeightAge: must be an integer"):
        load_config(tmp_path)


def test_an_unreadable_stored_policy_is_reported_and_never_overwritten(tmp_path: Path) -> None:
    """A policy document from a newer Caldera (or damaged): sacctmgr says which file and
    why, refuses changes, and the document stays as it was for repair."""
    import asyncio
    from types import SimpleNamespace

    from gateway.policy.service import PolicyService

    db = tmp_path / "c.db"
    store = SqliteStore(db)
    store.save_policy(seeded())
    newer = b'{"version": 99}'
    store._conn().execute("UPDATE policy SET doc = ? WHERE cluster='caldera'", (newer,))
    gw = SimpleNamespace(
        config=load_config(tmp_path),
        store=store,
        jobs={},
        clusters={},
        clock=lambda: 0.0,
        registry=SimpleNamespace(gates=[]),
    )
    svc = PolicyService(gw)  # type: ignore[arg-type]
    answer = asyncio.run(svc.sacctmgr(["-i", "add", "account", "x"], True, True))
    assert answer.rc == 1
    assert answer.stderr == (
        f"sacctmgr: error: {db}: the stored accounting policy cannot be read "
        "(policy document version 99 is not supported)\n"
    )
    row = store._rows("SELECT doc FROM policy WHERE cluster='caldera'")
    assert row == [(newer,)]
