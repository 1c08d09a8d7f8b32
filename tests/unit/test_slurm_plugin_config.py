"""The Slurm clusters file: the documented example loads, mistakes name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_plugin.config import (
    RestAuth,
    SlurmConfigError,
    SubmitAs,
    Transport,
    load_slurm_config,
    parse_slurm_config,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "slurm_plugin" / "clusters.example.toml"


def test_the_documented_example_loads() -> None:
    site = load_slurm_config(EXAMPLE)
    hpc = site.cluster("hpc")
    assert hpc.transport is Transport.CLI
    assert hpc.slurm_conf == "/etc/slurm/slurm.conf"
    assert hpc.submit_as is SubmitAs.USER
    assert hpc.rest_auth is RestAuth.LOCAL
    assert [(p.slurm, p.name, p.default) for p in hpc.partitions] == [
        ("batch", "hpc-batch", True),
        ("gpu", "hpc-gpu", False),
    ]
    assert hpc.containers.runtime == "podman"


def test_partition_names_map_both_ways() -> None:
    site = parse_slurm_config(
        {"cluster": [{"name": "c", "partition": [{"slurm": "real", "name": "c-real"}]}]}
    )
    c = site.cluster("c")
    assert c.slurm_partition("c-real") == "real"
    assert c.offered("real") == "c-real"
    assert c.slurm_partition("real") is None
    assert c.offered("debug") is None


def test_without_partitions_every_partition_is_offered_under_its_name() -> None:
    c = parse_slurm_config({"cluster": [{"name": "c"}]}).cluster("c")
    assert c.slurm_partition("anything") == "anything"
    assert c.offered("debug") == "debug"


def test_the_same_tables_may_live_under_slurm_in_caldera_toml() -> None:
    site = parse_slurm_config({"slurm": {"cluster": [{"name": "a"}, {"name": "b"}]}})
    assert [c.name for c in site.clusters] == ["a", "b"]


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"cluster": [{"name": "c", "bogus": 1}]}, "unknown setting(s) 'bogus'"),
        ({"cluster": [{}]}, "name is required"),
        ({"cluster": [{"name": "c", "transport": "rest"}]}, "transport 'rest' needs rest_url"),
        ({"cluster": [{"name": "c", "transport": "ssh"}]}, "transport must be one of"),
        ({"cluster": [{"name": "c", "rest_url": "/x.sock"}]}, "rest_url must start with"),
        ({"cluster": [{"name": "c"}, {"name": "c"}]}, "two clusters have the same name"),
        ({"cluster": [{"name": "c", "partition": [{"name": "x"}]}]}, "slurm (the partition"),
        ({"cluster": [{"name": "c", "instance": "a:b"}]}, "instance must be"),
        ({"cluster": [{"name": "c", "commands": False}]}, "commands = false needs"),
        ({"cluster": [{"name": "c", "poll_interval_s": -1}]}, "non-negative"),
        ({"cluster": [{"name": "c", "containers": {"runtime": "docker"}}]}, "runtime must be"),
    ],
)
def test_mistakes_are_reported_with_the_key(doc: dict[str, object], message: str) -> None:
    with pytest.raises(SlurmConfigError) as err:
        parse_slurm_config(doc)
    assert message in str(err.value)


def test_a_missing_or_broken_file_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(SlurmConfigError, match=r"nope\.toml"):
        load_slurm_config(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[[cluster]\n")
    with pytest.raises(SlurmConfigError, match=r"bad\.toml"):
        load_slurm_config(bad)
