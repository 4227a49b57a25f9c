import pytest

from slurmkit.backend.run import run
from slurmkit.errors import SlurmCommandError, SlurmTimeout


def test_run_ok_and_env_added():
    r = run(["sh", "-c", 'printf "%s" "$FOO"'], timeout=5, env={"FOO": "bar baz"})
    assert r.rc == 0 and r.stdout == "bar baz"


def test_run_failure_carries_argv_rc_stderr():
    with pytest.raises(SlurmCommandError) as ei:
        run(["sh", "-c", "echo boom >&2; exit 3"], timeout=5)
    assert ei.value.rc == 3 and "boom" in ei.value.stderr and ei.value.argv[0] == "sh"
    assert "rc=3" in str(ei.value) and "\n" not in ei.value.one_line()


def test_run_timeout_is_one_line():
    with pytest.raises(SlurmTimeout) as ei:
        run(["sleep", "5"], timeout=0.2)
    assert "timed out after 0.2s" in ei.value.one_line() and "sleep 5" in ei.value.one_line()


def test_missing_binary():
    with pytest.raises(SlurmCommandError) as ei:
        run(["definitely-not-a-slurm-binary"], timeout=5)
    assert ei.value.rc == 127


def test_string_argv_refused():
    with pytest.raises(TypeError):
        run("sinfo -N", timeout=5)  # type: ignore[arg-type]


def test_no_check_returns_result():
    r = run(["sh", "-c", "exit 4"], timeout=5, check=False)
    assert r.rc == 4
