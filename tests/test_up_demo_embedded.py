"""``memarc up --demo`` on the embedded defaults, as ``make demo`` runs it (issue 26, found by
the newcomer's trial): the printed commands for new administration and explorer sign-in links
run as printed in a shell that names no database nor data dir, from any folder, and one SIGINT
while the demo's cards are still being projected ends the process and the embedded PostgreSQL
and Redis it started."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

from helpers import ROOT, free_port, stop_process
from test_outages import _up_env, _wait_for


def _running(pattern: str) -> list[str]:
    """The command lines of this machine's processes that contain ``pattern``."""
    done = subprocess.run(["pgrep", "-af", pattern], capture_output=True, text=True)
    return [line for line in done.stdout.splitlines() if line.strip()]


def test_one_sigint_during_the_demo_projection_ends_everything(tmp_path):
    port, explorer_port = free_port(), free_port()
    log = tmp_path / "up.log"
    env = _up_env(tmp_path)  # no MEMARC_DATABASE_URL / MEMARC_REDIS_URL: the embedded services
    data_dir = env["MEMARC_DATA_DIR"]
    with log.open("ab") as out:  # the bundled BIRD cards: their projection takes minutes here
        proc = subprocess.Popen(
            [sys.executable, "-m", "writer.cli", "up", "--demo", "--port", str(port),
             "--explorer-port", str(explorer_port)],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        printed = _wait_for("the start block", lambda: re.search(
            r'"new_sign_in_links": (\{.*?\})', log.read_text(), re.S), 240, proc, log)
        command = json.loads(printed.group(1))["admin"]
        assert command.startswith("MEMARC_MIGRATOR_DATABASE_URL=")
        # as printed, in a shell that knows nothing of the embedded database
        shell = subprocess.run(["bash", "-c", command], capture_output=True, text=True,
                               timeout=120, env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"})
        assert shell.returncode == 0, shell.stderr
        link = json.loads(shell.stdout)["sign_in_link"]
        assert link.startswith(f"http://127.0.0.1:{port}/admin/sign-in/link?code=")
        # the explorer's, as printed, from another folder than the one memarc up runs in
        command = json.loads(printed.group(1))["explorer"]
        shell = subprocess.run(["bash", "-c", command], capture_output=True, text=True,
                               timeout=120, cwd="/", env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"})
        assert shell.returncode == 0, shell.stderr
        assert json.loads(shell.stdout)["explorer_sign_in"].startswith(
            f"http://127.0.0.1:{explorer_port}/-/memory/sign-in?ticket=")

        _wait_for("the projection under way", lambda: re.search(
            r"projected \d+/\d+ cards", log.read_text()), 240, proc, log)
        assert '"demo_ready": true' not in log.read_text()  # still projecting
        assert _running(f"{data_dir}/postgres"), "the embedded PostgreSQL should be running"
        os.kill(proc.pid, signal.SIGINT)  # one SIGINT to memarc up itself (not its children)
        started = time.monotonic()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            raise AssertionError("one SIGINT did not end memarc up within 60 s: "
                                 + log.read_text()[-2000:]) from None
        assert proc.returncode == 0, log.read_text()[-2000:]
        assert time.monotonic() - started < 60
        assert '"demo_ready": true' not in log.read_text()
        _wait_for("the embedded PostgreSQL stopped",
                  lambda: not _running(f"{data_dir}/postgres"), 30)
        assert not _running(f"{data_dir}/redis"), "the embedded Redis is left running"
    finally:
        stop_process(proc)
        # a failed stop leaves the embedded servers running (they are not in its process group)
        subprocess.run(["pkill", "-f", f"{data_dir}/(postgres|redis)"], check=False)
