"""A shadow rebuild of the bundled BIRD workspace with another copy of the dense model (issue 34
item 4): how long a plain rebuild and a shadow rebuild (build, gate of two evaluation runs,
switch) take side by side in one run, and recall while the shadow rebuild runs.

1. The 2,251 BIRD cards imported and projected (``bench/_archive.py``, Qdrant Edge).
2. A plain rebuild (``memarc index``): seconds.
3. A shadow rebuild with a copy of the model folder (the same files linked, plus a note: another
   fingerprint, the same vectors), while one recall at a time asks the BIRD questions: its
   seconds, the gate's verdict and the two runs' seconds, and recall latency (p50, p95, every
   answer a success) during it against the same questions on an idle archive just before.
4. The switch back to the kept index: seconds and how many points it kept.

Run: ``.venv/bin/python bench/shadow_rebuild.py`` (a PostgreSQL superuser URL, see
``bench/_archive.py``; about 6 minutes on 2 cores).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._archive import ROOT, build, model_env  # noqa: E402
from shared.auth import Principal  # noqa: E402
from shared.cards_file import bundled_cards, read_cards  # noqa: E402
from shared.evaluation.run import gate  # noqa: E402
from shared.models import SearchRequest  # noqa: E402
from shared.projection.rebuild import rebuild_index  # noqa: E402
from shared.store import rebuilds  # noqa: E402

QUESTIONS = ROOT.parent / "shared" / "datasets" / "bird_minidev" / "mini_dev_postgresql.json"


def _copy(root: Path) -> Path:
    source = Path(model_env()["MEMARC_DENSE_MODEL_PATH"]).resolve()
    folder = root / "copy"
    folder.mkdir()
    for f in source.iterdir():
        (folder / f.name).symlink_to(f)
    (folder / "NOTE").write_text("a copy for bench/shadow_rebuild.py\n")
    return folder


async def _rebuild(res, shadow: dict | None) -> tuple[dict, float]:
    rid = uuid.uuid4()
    async with res.db.transaction("bird") as conn:
        await rebuilds.insert(conn, rid, "bird", "bench", shadow)

    async def decide(candidate, model):
        return await gate(res.db, res.index, res.embedder, "bird", candidate, model,
                          actor="bench", privacy=res.privacy)

    t0 = time.perf_counter()
    row = await rebuild_index(res.db, res.index, res.embedder, "bird", rid, privacy=res.privacy,
                              gate=decide)
    return row, time.perf_counter() - t0


async def _recalls(archive, principal, questions, stop: asyncio.Event | None) -> list[float]:
    """One recall at a time over ``questions`` (again and again until ``stop`` is set, or once
    when there is none); the seconds of each."""
    out: list[float] = []
    while True:
        for q in questions:
            t0 = time.perf_counter()
            await archive.search(principal, "bird", SearchRequest(query=q["question"], top=5,
                                                                  mode="search"))
            out.append(time.perf_counter() - t0)
            if stop is not None and stop.is_set():
                return out
        if stop is None:
            return out


def _ms(values: list[float]) -> dict:
    values = sorted(values)
    return {"n": len(values), "p50_ms": round(statistics.median(values) * 1000, 1),
            "p95_ms": round(values[int(0.95 * (len(values) - 1))] * 1000, 1)}


async def main() -> None:
    bench = await build("shadow", read_cards(bundled_cards()), workspace="bird")
    res = bench.resources
    root = Path(tempfile.mkdtemp(prefix="memarc-bench-models-"))
    copy = _copy(root)
    archive = res.archive()
    principal = Principal(workspace="bird", permissions=frozenset({"memory.read"}), actor="bench")
    questions = json.loads(QUESTIONS.read_text())[:200]
    try:
        plain, plain_s = await _rebuild(res, None)
        idle = await _recalls(archive, principal, questions, None)
        stop = asyncio.Event()
        during = asyncio.create_task(_recalls(archive, principal, questions, stop))
        shadow, shadow_s = await _rebuild(res, {"dense_model": res.settings.dense_model,
                                                "dense_model_path": str(copy), "force": False,
                                                "restore": False})
        stop.set()
        busy = await during
        verdict = shadow["summary"]["evaluation"]
        runs = {}
        for role in ("baseline", "candidate"):
            async with res.db.transaction("bird") as conn:
                cur = await conn.execute("SELECT seconds, total FROM eval_runs WHERE id = %s",
                                         (uuid.UUID(verdict[role]),))
                runs[role] = await cur.fetchone()
        back, back_s = await _rebuild(res, {"dense_model": None, "dense_model_path": None,
                                            "force": True, "restore": True})
        print(json.dumps({
            "cards": plain["summary"]["cards"],
            "plain_rebuild_seconds": round(plain_s, 1),
            "shadow_rebuild_seconds": round(shadow_s, 1),
            "shadow_to_plain": round(shadow_s / plain_s, 2),
            "shadow_status": shadow["status"], "switch": verdict["switch"],
            "regressed": verdict["regressed"],
            "gate_runs": {k: {"seconds": round(v["seconds"], 1), "cases": v["total"]}
                          for k, v in runs.items()},
            "recall_idle": _ms(idle), "recall_during_shadow": _ms(busy),
            "p50_during_to_idle": round(statistics.median(busy) / statistics.median(idle), 2),
            "switch_back_seconds": round(back_s, 1), "switch_back_status": back["status"],
            "switch_back_reused": back["summary"]["reused"]}, indent=1))
    finally:
        await bench.close()


if __name__ == "__main__":
    asyncio.run(main())
