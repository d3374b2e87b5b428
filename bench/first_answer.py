"""Time to the first useful answer of ``memarc up --demo`` (issue 26): from the command's start
to the first moment a ``solved`` recall of a demo question returns the expected card first, for
the code of this checkout ("after") next to the code of a base commit ("before", default where
this branch left ``main``: the lease order in id order), in one run, one arm after the other,
each on a fresh data directory (embedded PostgreSQL, Redis and index, as ``make demo``).

Each arm polls, once a second, every probe not answered yet: the quick start's first query
(:data:`writer.demo.FIRST_QUESTION`, a rewording of BIRD question q-93) and ``--probes`` other
solved questions asked by their own text (spread over the cards file). It prints, per arm, the
seconds from start to: the demo's JSON info block (the import starts), the import's end, the
first answer of the quick start's question (and when the request that got it was sent: a recall
waits for the embedder while a batch is embedded), the median and the last of the probes' first
answers, and every card projected (the demo's ``demo_ready`` line); then the ratios after/before.

    .venv/bin/python bench/first_answer.py [--base COMMIT] [--probes 5] [--arms before,after]

The base's code is exported with ``git archive`` into a temporary folder and run by this
interpreter with that folder first on ``PYTHONPATH`` (checked: the arm prints where its modules
come from). The models are the team's offline copies (``../shared/models``) when present.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from writer.demo import FIRST_QUESTION

ROOT = Path(__file__).resolve().parents[1]
SHARED_MODELS = ROOT.parent / "shared" / "models"
CARDS = ROOT / "shared" / "data" / "bird_cards.jsonl.gz"
#: the card the quick start's first query (writer/demo.py) must find first
FIRST_EXPECTED = ("How many male customers who are living in North Bohemia have average salary "
                  "greater than 8000?")
WORKSPACE = "bird"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def probes(n: int) -> list[tuple[str, str]]:
    """``[(query, expected title)]``: the quick start's question, then ``n`` solved questions
    spread evenly over the cards file (each asked by its own question text), titles unique."""
    solved = []
    with gzip.open(CARDS, "rt") as f:
        for line in f:
            card = json.loads(line)
            if card["family"] == "solved_question":
                solved.append(card["title"])
    unique = [t for t in solved if solved.count(t) == 1 and t != FIRST_EXPECTED]
    step = max(1, len(unique) // (n + 1))
    return [(FIRST_QUESTION, FIRST_EXPECTED)] + [(t, t) for t in unique[step::step][:n]]


class Arm:
    """One ``memarc up --demo`` run: its output lines read in a thread with their times."""

    def __init__(self, name: str, code: Path, data_dir: Path,
                 settings: dict[str, str] | None = None) -> None:
        self.name, self.code, self.data_dir = name, code, data_dir
        self.settings = settings or {}
        self.port, self.explorer_port = free_port(), free_port()
        self.lines: list[tuple[float, str]] = []
        self.proc: subprocess.Popen[str] | None = None
        self.started = 0.0

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("MEMARC_") or k.endswith("_MODEL_PATH")}
        for key, folder in (("MEMARC_DENSE_MODEL_PATH", "all-MiniLM-L6-v2-onnx"),
                            ("MEMARC_BM25_MODEL_PATH", "bm25")):
            if key not in env and (SHARED_MODELS / folder).exists():
                env[key] = str(SHARED_MODELS / folder)
        env.update(self.settings)
        env["MEMARC_DATA_DIR"] = str(self.data_dir)
        env["PYTHONPATH"] = str(self.code)
        return env

    def origin(self) -> str:
        """Where the arm's ``shared.store.outbox`` is imported from."""
        return subprocess.run(
            [sys.executable, "-c", "import shared.store.outbox as o; print(o.__file__)"],
            cwd=self.code, env=self.env(), capture_output=True, text=True, check=True
        ).stdout.strip()

    def start(self) -> None:
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from writer.cli import main; main()", "up", "--demo",
             "--port", str(self.port), "--explorer-port", str(self.explorer_port)],
            cwd=self.code, env=self.env(), stdout=subprocess.PIPE,
            stderr=(self.data_dir.parent / f"{self.name}.stderr").open("w"), text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc and self.proc.stdout
        for line in self.proc.stdout:
            self.lines.append((time.monotonic() - self.started, line.rstrip("\n")))

    def info(self) -> dict[str, Any] | None:
        """The JSON block ``memarc up`` prints at start (indented: several lines), once read."""
        text = "\n".join(line for _, line in self.lines)
        start = text.find("{\n")
        end = text.find("\n}", start)
        return json.loads(text[start:end + 2]) if start >= 0 and end >= 0 else None

    def at(self, prefix: str) -> float | None:
        """Seconds from start to the first output line starting with ``prefix``."""
        return next((t for t, line in self.lines if line.startswith(prefix)), None)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def run_arm(arm: Arm, asked: list[tuple[str, str]], timeout: float) -> dict[str, Any]:
    """Start the arm, poll its probes once a second until all answered and every card is
    projected (or ``timeout`` seconds), stop it; returns its figures (seconds from start)."""
    print(f"[{arm.name}] modules from {arm.origin()}", flush=True)
    arm.start()
    answered: dict[int, float] = {}
    asked_at: dict[int, float] = {}  # when the request that got the answer was sent
    try:
        while arm.info() is None or "token" not in (arm.info() or {}):
            if arm.proc and arm.proc.poll() is not None:
                err = (arm.data_dir.parent / f"{arm.name}.stderr").read_text()
                raise SystemExit(f"[{arm.name}] memarc up exited: {arm.lines[-5:]} {err[-2000:]}")
            if time.monotonic() - arm.started > timeout:
                raise SystemExit(f"[{arm.name}] no info block after {timeout} s")
            time.sleep(0.2)
        info = arm.info()
        assert info is not None
        url = f"{info['writer']}/api/workspaces/{WORKSPACE}/memory/search"
        headers = {"Authorization": f"Bearer {info['token']}"}
        with httpx.Client(timeout=30) as client:
            while time.monotonic() - arm.started < timeout:
                tick = time.monotonic()
                for i, (query, expected) in enumerate(asked):
                    if i in answered:
                        continue
                    sent = time.monotonic() - arm.started
                    try:
                        r = client.post(url, headers=headers,
                                        json={"query": query, "mode": "solved", "top": 1})
                    except httpx.TransportError:  # the writer is not listening yet
                        break
                    if r.status_code == 200 and r.json()["results"] and \
                            r.json()["results"][0]["card"]["title"] == expected:
                        answered[i] = time.monotonic() - arm.started
                        asked_at[i] = sent
                if len(answered) == len(asked) and arm.at('{"demo_ready"') is not None:
                    break
                time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
    finally:
        arm.stop()
    ready = next((json.loads(line) for _, line in arm.lines if line.startswith('{"demo_ready"')),
                 {})
    times = [answered.get(i) for i in range(len(asked))]
    found = [t for t in times if t is not None]
    return {"info_block": arm.at("{"), "imported": arm.at('{"imported"'),
            "first_question": times[0],
            "first_question_sent": asked_at.get(0),
            "first_question_after_info_block": (times[0] - arm.at("{")
                                                if times[0] is not None else None),
            "probes_median": statistics.median(found) if found else None,
            "probes_last": max(found) if len(found) == len(times) else None,
            "unanswered": len(times) - len(found),
            "all_projected": arm.at('{"demo_ready"'),
            "seconds_to_import_and_project": ready.get("seconds_to_import_and_project"),
            "cards": ready.get("cards")}


def export_base(ref: str, into: Path) -> Path:
    """The tree of ``ref`` (this repository's) exported into ``into``; returns it."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def main() -> None:
    """Run the arms and print their figures and the ratios after/before (JSON lines)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", help="the commit of the 'before' arm (default: where this "
                    "branch left main, `git merge-base HEAD main`)")
    ap.add_argument("--probes", type=int, default=5, help="solved questions besides the first")
    ap.add_argument("--arms", default="before,after", help="which arms, in this order")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per arm at most")
    ap.add_argument("--lease-seconds", type=int,
                    help="MEMARC_LEASE_SECONDS of both arms (also the job timeout); on a machine "
                         "so busy that a batch of 256 cards outlasts the default 120 s, a job is "
                         "cut short and retried without end")
    ap.add_argument("--log", type=Path, help="a folder for each arm's output with its times")
    args = ap.parse_args()
    base = args.base or subprocess.run(["git", "-C", str(ROOT), "merge-base", "HEAD", "main"],
                                       check=True, capture_output=True, text=True).stdout.strip()
    print(json.dumps({"before": base, "after": "this checkout"}), flush=True)
    asked = probes(args.probes)
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="memarc-first-answer-") as tmp:
        for name in args.arms.split(","):
            code = ROOT if name == "after" else export_base(base, Path(tmp) / "base")
            settings = ({"MEMARC_LEASE_SECONDS": str(args.lease_seconds)}
                        if args.lease_seconds else {})
            arm = Arm(name, code, Path(tmp) / f"data-{name}", settings)
            results[name] = run_arm(arm, asked, args.timeout)
            if args.log:
                args.log.mkdir(parents=True, exist_ok=True)
                (args.log / f"{name}.log").write_text(
                    "".join(f"{t:8.1f} {line}\n" for t, line in arm.lines))
            print(json.dumps({"arm": name, **results[name]}), flush=True)
    if {"before", "after"} <= results.keys():
        ratios = {}
        for key in ("first_question", "probes_median", "probes_last", "all_projected"):
            b, a = results["before"][key], results["after"][key]
            ratios[key] = round(a / b, 3) if a and b else None
        print(json.dumps({"ratio_after_over_before": ratios}), flush=True)


if __name__ == "__main__":
    main()
