"""Per-branch candidate lists of the rule sets (issue 27), recorded once through the real recall
path, so that fusion variants can be evaluated offline (``bench/tune_rules_sets.py``).

For every query of every set of ``bench/rule_sets_data.py`` (as ``bench/rules_sets.py`` groups
them), and for ``bird-a`` (the BIRD clause pairs of ``bench/recall_quality.py``'s ``bird-a`` part
in ``rules`` mode: each fold's archive, the other fold's questions asked for the ``sql_rule``
clauses they link to, with the question's database as filter (tag ``db``) and workspace-wide
(tag ``ws``); the profile this issue started from was chosen on them), the product's ``rules`` recall runs through ``shared.recall.verified.recall`` with an index
wrapper that asks the engine for *all* the collection's named vectors (``dense``, ``key``,
``own``, ``bm25``, ``key_bm25``, ``own_bm25``) with the filter and the seed count the real call
uses, and records each branch's best-first ``(id, raw score)`` hits; the dense-only and BM25-only
peers run the same way on the peer index (format 2's text). The real ranks of the three
configurations are recorded too, so that the offline fusion can be checked against them
(``tune_rules_sets.py --check``): the rule cards have no links and every hit is eligible, so the
real ranking is the fused ranking cut to ``top``.

Run: ``.venv/bin/python bench/rules_branch_cache.py [--sets ...] [--limit N] [--half TUNE]
[--out FILE]``
(default ``bench/results/rules_branches.json``, git-ignored).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.recall_quality import (PEERS, QueryCache, bird_cards, bird_folds,  # noqa: E402
                                  compared)
from bench.rule_sets_data import Query, RuleSet, all_sets  # noqa: E402
from shared.models import Filters, SearchRequest  # noqa: E402
from shared.recall.verified import recall  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "rules_branches.json"
RECORDED_PEERS = ("dense only", "BM25 only")


class RecordingIndex:
    """``engine`` whose :meth:`hybrid_query` asks for every named vector of ``layout`` and
    records each branch's hits (``calls``: one dict per call, ``{name: [[id, score], …]}``);
    it returns the branches the caller asked for, as the engine would."""

    def __init__(self, engine: Any, layout: Any):
        self._engine, self._layout, self.calls = engine, layout, []

    async def hybrid_query(self, workspace: str, dense: list[float], sparse: Any, flt: Any,
                           limit: int, *, dense_names: tuple[str, ...] = (),
                           sparse_names: tuple[str, ...] = ()) -> dict[str, list]:
        got = await self._engine.hybrid_query(workspace, dense, sparse, flt, limit,
                                              dense_names=tuple(self._layout.dense),
                                              sparse_names=tuple(self._layout.sparse))
        self.calls.append({n: [[str(h.id), h.score] for h in hits] for n, hits in got.items()})
        return {n: got[n] for n in (*dense_names, *sparse_names)}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)


async def record_set(rule_set: Any, limit: int | None, prefix: str, half: str | None = None
                     ) -> list[dict]:
    """One entry per distinct (text, database) of the set: the wanted card UUIDs with their half
    and tags, the product's and the peers' recorded branches, and the real ranks (top 10)."""
    pair, by_key = await compared(f"{prefix}{rule_set.name}", rule_set.cards)
    res = pair.bench.resources
    queries = [q for q in rule_set.queries if half in (None, q.half)]
    if limit:
        queries = queries[::max(1, len(queries) // limit)]
    grouped: dict[tuple, list] = defaultdict(list)
    for q in queries:
        grouped[(q.text, q.database)].append(q)
    out: list[dict] = []
    t0 = time.perf_counter()
    try:
        for (text, database), qs in grouped.items():
            wanted = [by_key[q.wanted] for q in qs]
            req = SearchRequest(query=text, top=10, mode="rules",
                                filters=Filters(database=database) if database else None)
            cache = QueryCache(res.embedder)
            entry: dict[str, Any] = {
                "text": text, "database": database,
                "wanted": [{"id": w[4:], "half": q.half, "tags": list(q.tags)}
                           for w, q in zip(wanted, qs)],
                "real": {}}
            index = RecordingIndex(res.index, res.embedder.layout("en"))
            got = await recall(res.db, index, cache, pair.bench.principal, pair.bench.workspace,
                               req)
            entry["product"] = index.calls
            entry["real"]["product"] = [r.card.id[4:] for r in got.results]
            peer = RecordingIndex(pair.peer, pair.peer_layout)
            for name in RECORDED_PEERS:
                got = await recall(res.db, peer, cache, pair.bench.principal,
                                   pair.bench.workspace, req, profile=PEERS[name],
                                   layout=pair.peer_layout)
                entry["real"][name] = [r.card.id[4:] for r in got.results]
            entry["peer"] = peer.calls[:1]
            entry["peer_calls"] = len(peer.calls)
            out.append(entry)
        print(f"  {rule_set.name}: {len(queries)} pairs, {len(grouped)} queries recorded in "
              f"{time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    finally:
        await pair.close()
    return out


def bird_a_folds() -> list[RuleSet]:
    """``bird-a``'s two fold archives as rule sets (module docstring,
    ``recall_quality.bird_folds``): one query per asked question, linked ``sql_rule`` clause and
    scope."""
    cards = bird_cards()
    by_key = {c.key: c for c in cards}
    folds = []
    for fold, archive, asked in bird_folds(cards):
        queries = [Query(s.content["question"], link.target, database, half, (scope,))
                   for s, db, half in asked for link in s.links
                   if by_key[link.target].family == "sql_rule"
                   for scope, database in (("db", db), ("ws", None))]
        folds.append(RuleSet(f"birda{fold}", archive, queries))
    return folds


async def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default="evidence,procedures,critic,lint,bird-a")
    ap.add_argument("--limit", type=int, default=None, help="about N queries per set")
    ap.add_argument("--half", choices=["TUNE", "REPORT"], default="TUNE",
                    help="the half recorded (default TUNE: what the profile is chosen on)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    wanted = args.sets.split(",")
    t0 = time.perf_counter()
    data: dict[str, list[dict]] = {}
    for rule_set in all_sets():
        if rule_set.name in wanted:
            data[rule_set.name] = await record_set(rule_set, args.limit, "rbc_", args.half)
    if "bird-a" in wanted:
        data["bird-a"] = []
        for fold in bird_a_folds():
            data["bird-a"] += await record_set(fold, args.limit, "rbc_", args.half)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"seconds": round(time.perf_counter() - t0), "limit": args.limit,
                                    "half": args.half,
                                    "sets": data}))
    print(f"{args.out} ({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    asyncio.run(main())
