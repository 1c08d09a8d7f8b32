"""GRES and GPU requests: the TRES text Slurm records, and sbatch's GRES check."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.compat.errors import CompatError
from gateway.compat.gres import gpus_tres, gres_tres, parse_gpus, parse_gres
from gateway.compat.gres_check import GresCounts, GresRequest, check_gres, check_tres_strings
from gateway.model.values import GresItem

NAMES = ("gpu", "craynetwork", "qpu")


def counts(**kw: int | None) -> GresCounts:
    base: dict[str, int | None] = dict.fromkeys(
        (
            "num_tasks",
            "min_nodes",
            "max_nodes",
            "ntasks_per_node",
            "ntasks_per_socket",
            "sockets_per_node",
            "cpus_per_task",
            "ntasks_per_tres",
        )
    )
    base.update(kw)
    return GresCounts(**base)  # type: ignore[arg-type]


def gpus(text: str) -> tuple[GresItem, ...]:
    items = parse_gpus(text)
    assert items is not None
    return items


# --- parsing and the recorded text --------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "items"),
    [
        ("gpu:2", [("gpu", None, 2)]),
        ("gpu:a100:2", [("gpu", "a100", 2)]),
        ("gpu", [("gpu", None, 1)]),
        ("gpu:v100", [("gpu", "v100", 1)]),
        ("gpu:2k", [("gpu", None, 2048)]),
        ("gpu:1kb", [("gpu", None, 1000)]),
        ("gpu:-1", [("gpu", "-1", 1)]),  # not a number: a type with count 1
        ("gpu:1,craynetwork:2", [("gpu", None, 1), ("craynetwork", None, 2)]),
        ("gres:gpu:1", [("gpu", None, 1)]),
        ("gpu:0", [("gpu", None, 0)]),  # kept in the text, requests nothing
    ],
)
def test_gres_items_read_as_slurm_does(text: str, items: list[tuple[str, str | None, int]]) -> None:
    parsed = parse_gres(text)
    assert parsed is not None
    assert [(i.name, i.type, i.count) for i in parsed] == items


@pytest.mark.parametrize("text", ["gpu:", "gpu::1", "gpu:a100:", "gpu:a100:1x", "gpu:a:1:2"])
def test_malformed_gres_items_are_refused(text: str) -> None:
    assert parse_gres(text) is None


def test_none_is_no_gres() -> None:
    assert parse_gres("none") == parse_gres("NONE") == ()
    assert gres_tres("none") is None


def test_recorded_text_keeps_the_users_spelling() -> None:
    parsed = parse_gres("gpu,craynetwork:2k")
    assert parsed is not None
    assert [i.tres() for i in parsed] == ["gres:gpu", "gres:craynetwork:2k"]
    assert [i.tres() for i in gpus("a100:2,1")] == ["gres:gpu:a100:2", "gres:gpu:1"]


def test_gres_prefix_is_not_doubled_and_gpus_drop_empty_items() -> None:
    assert gres_tres("gres:gpu:1,x") == ["gpu:1", "x"]
    assert gpus_tres("1,,2") == ["gpu:1", "gpu:2"]


def test_canonical_items_render_with_their_count() -> None:
    assert GresItem("gpu", "a100", 4).tres() == "gres:gpu:a100:4"


@given(st.text(alphabet="gpuacr10:,k-x", max_size=16))
def test_any_gres_text_gives_items_or_none(text: str) -> None:
    parsed = parse_gres(text)
    if parsed:
        assert parse_gres(",".join(i.render() for i in parsed)) == parsed


@given(st.text(max_size=20))
def test_any_gpus_text_gives_gpu_items_or_none(text: str) -> None:
    parsed = parse_gpus(text)
    assert parsed is None or all(i.name == "gpu" for i in parsed)


# --- the GRES check ---------------------------------------------------------------------


def test_gpus_and_gpus_per_node_fix_the_node_count() -> None:
    req = GresRequest(per_job=gpus("4"), per_node=gpus("2"))
    out = check_gres(req, counts(), NAMES)
    assert (out.min_nodes, out.max_nodes) == (2, 2)


def test_gpus_and_gpus_per_task_fix_the_task_count() -> None:
    out = check_gres(GresRequest(per_job=gpus("2"), per_task=gpus("1")), counts(), NAMES)
    assert out.num_tasks == 2


def test_cpus_per_gpu_times_gpus_per_task_gives_cpus_per_task() -> None:
    req = GresRequest(per_task=gpus("2"), cpus_per_gpu=2)
    out = check_gres(req, counts(num_tasks=2), NAMES)
    assert out.cpus_per_task == 4


def test_ntasks_per_gpu_multiplies_the_gpus() -> None:
    out = check_gres(GresRequest(per_job=gpus("2")), counts(ntasks_per_tres=2), NAMES)
    assert out.num_tasks == 4


def test_gpus_per_task_and_node_count_imply_tasks() -> None:
    out = check_gres(GresRequest(per_task=gpus("1")), counts(min_nodes=2, max_nodes=2), NAMES)
    assert out.num_tasks == 2


@pytest.mark.parametrize(
    ("req", "c", "lines"),
    [
        (
            GresRequest(per_task=gpus("2")),
            counts(),
            [
                "Failed to validate job spec. --gpus-per-task used without either --gpus or "
                "-n/--ntasks is not allowed."
            ],
        ),
        (
            GresRequest(per_job=gpus("3"), per_node=gpus("2")),
            counts(),
            ["Failed to validate job spec, --gpus is not multiple of --gres=gpu/--gpus-per-node"],
        ),
        (
            GresRequest(per_job=gpus("1")),
            counts(min_nodes=2),
            ["Failed to validate job spec, --gpus < -N"],
        ),
        (
            GresRequest(mem_per_gpu_mb=1024),
            counts(),
            ["Requested mem_per_tres=gres:gpu:1024 but did not request any GPU."],
        ),
        (
            GresRequest(per_job=gpus("1"), cpus_per_gpu=2),
            counts(cpus_per_task=2),
            ["--cpus-per-gpu is mutually exclusive with --cpus-per-task"],
        ),
        (
            GresRequest(per_socket=gpus("1")),
            counts(),
            ["--gpus-per-socket option requires --sockets-per-node specification"],
        ),
    ],
)
def test_inconsistent_requests_fail_with_slurms_lines(
    req: GresRequest, c: GresCounts, lines: list[str]
) -> None:
    with pytest.raises(CompatError) as info:
        check_gres(req, c, NAMES)
    expected = [*lines, "Invalid generic resource (gres) specification"]
    assert info.value.render() == "".join(f"sbatch: error: {line}\n" for line in expected)
    assert info.value.exit_code == 1


def test_unknown_gres_names_are_refused_when_the_site_is_known() -> None:
    req = GresRequest(per_node=parse_gres("foo:1") or ())
    with pytest.raises(CompatError):
        check_gres(req, counts(), NAMES)
    assert check_gres(req, counts(), None).num_tasks is None  # any name without a site list


def test_typed_and_untyped_counts_of_one_gres_conflict() -> None:
    with pytest.raises(CompatError) as info:
        check_gres(GresRequest(per_node=parse_gres("gpu:2,gpu:a100:1") or ()), counts(), NAMES)
    assert "with and without type identification" in info.value.message


def test_clusters_jobs_are_refused_by_the_controller_in_one_line() -> None:
    with pytest.raises(CompatError) as info:
        check_gres(GresRequest(per_task=gpus("2")), counts(), NAMES, by_controller=True)
    assert info.value.render() == (
        "sbatch: error: Batch job submission failed: "
        "Invalid generic resource (gres) specification\n"
    )


def test_an_empty_gres_item_is_refused_as_a_tres() -> None:
    with pytest.raises(CompatError) as info:
        check_tres_strings(GresRequest(per_node_has_empty_item=True))
    assert "Invalid Trackable RESource (TRES) specification" in info.value.message


@given(
    st.lists(st.sampled_from(["1", "2", "4", "a100:1", "v100:2", "0"]), max_size=3),
    st.lists(st.sampled_from(["1", "2", "a100:2"]), max_size=2),
    st.lists(st.sampled_from(["1", "2"]), max_size=1),
    st.one_of(st.none(), st.integers(1, 8)),
    st.one_of(st.none(), st.integers(1, 8)),
    st.one_of(st.none(), st.integers(1, 4)),
    st.one_of(st.none(), st.integers(1, 4)),
)
def test_any_request_gives_counts_or_compat_error(
    job: list[str],
    node: list[str],
    task: list[str],
    num_tasks: int | None,
    nodes: int | None,
    cpus_per_gpu: int | None,
    per_tres: int | None,
) -> None:
    req = GresRequest(
        per_job=gpus(",".join(job)) if job else (),
        per_node=gpus(",".join(node)) if node else (),
        per_task=gpus(",".join(task)) if task else (),
        cpus_per_gpu=cpus_per_gpu,
    )
    try:
        out = check_gres(
            req, counts(num_tasks=num_tasks, min_nodes=nodes, ntasks_per_tres=per_tres), NAMES
        )
    except CompatError as exc:
        code = exc.exit_code
    else:
        code = 0
        assert out.num_tasks is None or out.num_tasks >= 0
    assert code in (0, 1)
