"""Resident memory of the embedding worker over repeated projections of long texts (issue 25,
case 3).

Each variant runs in a fresh child process: load the models, embed one batch of short cards (the
idle figure), then ``--rounds`` batches of ``--cards`` long cards (~120,000 characters each,
:func:`~shared.projection.project.build_points`: the documents through the privacy filter, then
every named vector embedded), then short batches again. The resident set size (``VmRSS``, MB) is
read after each step; ``peak`` is ``VmHWM``.

Variants: ``bounded`` is the code as it is (dense batches bounded by estimated tokens,
onnxruntime's CPU arena off for the document sessions, ``malloc_trim`` after each call);
``old`` puts back what the code did before (16 texts a batch whatever their length, the arena
on, no trim).

Run: ``.venv/bin/python bench/worker_memory.py [--cards 32] [--rounds 4] [--variant both]``
(models as in ``bench/_archive.py``; no database needed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def rss_mb(field: str = "VmRSS") -> float:
    """This process's resident set size (``VmRSS``) or its peak (``VmHWM``), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def make_cards(n: int, long: bool, offset: int = 0) -> list:
    """``n`` cards: long explained errors (~120,000 characters) or short rules."""
    import uuid
    from datetime import datetime, timezone

    from shared.models import Card
    from test_loop_latency import long_card

    now = datetime.now(timezone.utc)
    out = []
    for i in range(offset, offset + n):
        body = long_card(i) if long else {"family": "sql_rule", "title": f"Rule {i}",
                                          "content": {"rule": f"Amounts of order {i} in EUR."}}
        out.append(Card(id=f"mem-{uuid.uuid4()}", workspace="bench", family=body["family"],
                        title=body["title"], content=body["content"], scope=None, concepts=[],
                        dependencies=[], links=[], source=None, origin="import", revision=1,
                        created_at=now, updated_at=now))
    return out


def old_ways() -> None:
    """Put back the embedding of before issue 25: count-only batches, arena on, no trim."""
    from shared.index import embedding

    embedding.DENSE_BATCH_TOKENS = 10 ** 9
    embedding.DOCUMENT_ARENA = True
    embedding.trim_heap = lambda: None


async def child(variant: str, cards: int, rounds: int) -> dict:
    from bench._archive import model_env
    from shared.config import load_settings
    from shared.index.embedding import Embedder
    from shared.projection.project import build_points

    if variant == "old":
        old_ways()
    embedder = Embedder(load_settings(model_env()))
    embedder.load(("en",))
    steps: list[dict] = []

    async def step(name: str, batch: list) -> None:
        started = time.perf_counter()
        await build_points(embedder, batch, "en")
        steps.append({"step": name, "rss": rss_mb(), "seconds": time.perf_counter() - started})

    await step("short", make_cards(64, False))
    for r in range(rounds):
        await step(f"long {r + 1}", make_cards(cards, True, r * cards))
    for r in range(2):
        await step(f"short {r + 1}", make_cards(64, False, 1000 + r * 64))
    return {"variant": variant, "steps": steps, "peak": rss_mb("VmHWM")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cards", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--variant", choices=("old", "bounded", "both"), default="both")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(child(args.variant, args.cards, args.rounds))))
        return
    results = []
    for variant in (("old", "bounded") if args.variant == "both" else (args.variant,)):
        out = subprocess.run([sys.executable, __file__, "--child", "--variant", variant,
                              "--cards", str(args.cards), "--rounds", str(args.rounds)],
                             check=True, capture_output=True, text=True).stdout
        results.append(json.loads(out.strip().splitlines()[-1]))
    print(f"{args.rounds} rounds of {args.cards} long cards (~120,000 characters); RSS in MB")
    print(f"{'step':10}" + "".join(f"{r['variant']:>12}{'s':>7}" for r in results))
    for i, first in enumerate(results[0]["steps"]):
        print(f"{first['step']:10}" + "".join(
            f"{r['steps'][i]['rss']:12.0f}{r['steps'][i]['seconds']:7.1f}" for r in results))
    print(f"{'peak':10}" + "".join(f"{r['peak']:12.0f}{'':7}" for r in results))


if __name__ == "__main__":
    main()
