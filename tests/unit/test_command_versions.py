"""Every command's `--version` says what Debian's build of Slurm 22.05.8 says (the test
clusters': `slurm-wlm 22.05.8` on stdout, exit 0), without a gateway to ask."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from containers.srun_options import VERSION_TEXT
from gateway.cli import policy_cmds, salloc_cmd, sbatch_cmd, scancel_cmd, sinfo_cmd, squeue_cmd
from gateway.compat.options_help import version_text
from gateway.policy.sacctmgr_parse import VERSION, parse_argv
from gateway.policy.values import SacctmgrError

EXPECTED = "slurm-wlm 22.05.8\n"


def test_one_version_text_for_every_command() -> None:
    assert version_text() == EXPECTED
    assert VERSION_TEXT + "\n" == EXPECTED  # srun's, shipped to pods without the gateway
    with pytest.raises(SacctmgrError) as said:
        parse_argv(["--version"])
    assert said.value.message + "\n" == EXPECTED == VERSION + "\n"


@pytest.mark.parametrize(
    ("main", "argv"),
    [
        (sbatch_cmd.main, ["--version"]),
        (salloc_cmd.main, ["--version"]),  # was a traceback: the version taken for a job id
        (salloc_cmd.main, ["-V"]),
        (squeue_cmd.main, ["--version"]),
        (sinfo_cmd.main, ["-V"]),
        (scancel_cmd.main, ["--version"]),
        (policy_cmds.sprio_main, ["--version"]),  # was sprio's priority plugin message
        (policy_cmds.sshare_main, ["-l", "-V"]),  # was "unrecognized option"
    ],
)
def test_version_is_printed_and_exits_zero(
    main: Callable[[Sequence[str]], int],
    argv: list[str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CALDERA_SOCKET", "/nonexistent/caldera.sock")  # nothing to ask
    assert main(argv) == 0
    out = capsys.readouterr()
    assert out.out == EXPECTED, out
