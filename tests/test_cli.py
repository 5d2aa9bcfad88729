import subprocess
import sys


def run_fdprof(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fdprof", *args], capture_output=True, text=True, timeout=120
    )


def test_help_lists_commands():
    result = run_fdprof("--help")
    assert result.returncode == 0
    assert "usage: fdprof" in result.stdout


def test_unknown_command_is_one_line_exit_2():
    result = run_fdprof("no-such-command")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr


def test_unwritable_output_is_one_line_exit_2():
    result = run_fdprof("hazards", "/no/such/trace")
    assert result.returncode == 2 and "no such file" in result.stderr
    result = run_fdprof("run", "--requests", "1", "--out", "/proc/fdprof-cannot-create")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "fdprof run: /proc/fdprof-cannot-create: No such file or directory"
    )
