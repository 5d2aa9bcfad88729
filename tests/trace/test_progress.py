"""Progress with an ETA on a terminal, nothing when stderr is not one."""

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios

from shared_data import DATA

TRACE = DATA / "hta" / "control.json.gz"


def _convert(tmp_path, stderr, env_extra):
    env = os.environ | env_extra
    return subprocess.run(
        [sys.executable, "-m", "fdprof", "convert", str(TRACE), str(tmp_path / "out.json")],
        stdout=subprocess.PIPE, stderr=stderr, env=env, timeout=600,
    )  # fmt: skip


def test_convert_shows_progress_with_eta_on_a_terminal(tmp_path):
    main, replica = pty.openpty()
    fcntl.ioctl(replica, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # 100 columns
    done = _convert(tmp_path, replica, {"FDPROF_PROGRESS_DELAY_S": "0"})
    os.close(replica)
    shown = b""
    while True:
        try:
            chunk = os.read(main, 1 << 16)
        except OSError:
            break
        if not chunk:
            break
        shown += chunk
    os.close(main)
    assert done.returncode == 0
    text = shown.decode(errors="replace")
    assert "reading control.json.gz" in text and "writing spans" in text
    assert "<" in text and "%|" in text  # tqdm's elapsed<remaining and its bar


def test_convert_is_quiet_when_stderr_is_not_a_terminal(tmp_path):
    done = _convert(tmp_path, subprocess.PIPE, {"FDPROF_PROGRESS_DELAY_S": "0"})
    assert done.returncode == 0
    assert b"reading" not in done.stderr and b"%|" not in done.stderr
