"""Retrieval quality on the BIRD cards: hybrid vs dense-only vs BM25-only, with and without link
expansion, per mode and per family. Run: ``.venv/bin/python bench/recall_quality.py``
(``make bench``); needs a PostgreSQL superuser URL (see ``bench/_archive.py``).

Checks:
(a) clarification recall: for every evidence clause shared by two or more BIRD questions, query
    each of those questions (original wording) in ``search`` mode (and in ``rules`` mode for
    clauses stored as SQL rules): is the clause's card in the top 1 / top 5; MRR@10. Also with
    the question's database as a physical-context filter, as an assistant that knows the
    database would ask.
(b) solved-question recall: the hand-written rewordings in ``bench/fixtures/reworded_questions.jsonl``
    queried in ``solved`` mode: is the original solved question at rank 1 / in the top 5; MRR@10.

Prints one table; all variants are measured in the same run on the same archive.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._archive import ROOT, build  # noqa: E402
from shared.cards_file import bundled_cards, read_cards  # noqa: E402
from shared.models import Filters, ImportCard, SearchRequest, card_id_str  # noqa: E402
from shared.recall.verified import recall  # noqa: E402

VARIANTS = {
    "hybrid": ((1.0, 1.0), True),
    "hybrid, no links": ((1.0, 1.0), False),
    "dense only": ((1.0, 0.0), True),
    "bm25 only": ((0.0, 1.0), True),
}


def metrics(ranks: list[int | None]) -> dict[str, float]:
    n = len(ranks) or 1
    return {"n": len(ranks),
            "r@1": sum(1 for r in ranks if r == 1) / n,
            "r@5": sum(1 for r in ranks if r and r <= 5) / n,
            "mrr": sum(1 / r for r in ranks if r) / n}


async def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cards", default=str(bundled_cards()), help="cards file")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args(argv)
    cards: list[ImportCard] = read_cards(Path(args.cards))
    t0 = time.perf_counter()
    bench = await build("quality", cards)
    setup = time.perf_counter() - t0

    with psycopg.connect(bench.db_url) as conn:
        solved = {row[0]: row[1] for row in conn.execute(
            "SELECT source->>'record', id FROM memory.cards WHERE family = 'solved_question'")}
        question_text = {row[0]: row[1] for row in conn.execute(
            "SELECT id, content->>'question' FROM memory.cards WHERE family = 'solved_question'")}
        database_of = {row[0]: row[1] for row in conn.execute(
            "SELECT card_id, min(database_name) FROM memory.card_dependencies GROUP BY card_id")}
        links = conn.execute(
            "SELECT l.source_id, l.target_id, t.family FROM memory.card_links l "
            "JOIN memory.cards s ON s.id = l.source_id JOIN memory.cards t ON t.id = l.target_id "
            "WHERE s.family = 'solved_question'").fetchall()
    users: dict = defaultdict(set)
    target_family = {}
    for src, dst, fam in links:
        users[dst].add(src)
        target_family[dst] = fam
    shared_pairs = [(q, clause) for clause, qs in users.items() if len(qs) >= 2 for q in sorted(qs, key=str)]
    reworded = [json.loads(x) for x in (ROOT / "bench/fixtures/reworded_questions.jsonl").read_text().splitlines()]

    async def rank_of(query: str, mode: str, want, weights, expand, top=10,
                      database: str | None = None) -> int | None:
        req = SearchRequest(query=query, top=top, mode=mode,
                            filters=Filters(database=database) if database else None)
        res = await recall(bench.resources.db, bench.resources.index, bench.resources.embedder,
                           bench.principal, bench.workspace, req, branch_weights=weights,
                           expand=expand)
        ids = [r.card.id for r in res.results]
        return ids.index(card_id_str(want)) + 1 if card_id_str(want) in ids else None

    rows = []
    for name, (weights, expand) in VARIANTS.items():
        per: dict[str, list] = defaultdict(list)
        for q, clause in shared_pairs:
            fam = target_family[clause]
            r = await rank_of(question_text[q], "search", clause, weights, expand)
            per[f"(a) search / {fam}"].append(r)
            per["(a) search / all"].append(r)
            per["(a) search+database / all"].append(await rank_of(
                question_text[q], "search", clause, weights, expand, database=database_of[q]))
            if fam == "sql_rule":
                per["(a) rules / sql_rule"].append(
                    await rank_of(question_text[q], "rules", clause, weights, expand))
        for item in reworded:
            want = solved[str(item["question_id"])]
            per["(b) solved / reworded"].append(
                await rank_of(item["reworded"], "solved", want, weights, expand))
            per["(b) solved / original"].append(
                await rank_of(item["original"], "solved", want, weights, expand))
        for check, ranks in sorted(per.items()):
            rows.append({"variant": name, "check": check, **metrics(ranks)})

    await bench.close()
    if args.json:
        print(json.dumps({"setup_seconds": round(setup, 1), "cards": len(cards),
                          "projection_seconds": round(bench.seconds_to_project, 1), "rows": rows},
                         indent=2))
        return
    print(f"cards: {len(cards)}; import + projection: {setup:.1f} s "
          f"(projection {bench.seconds_to_project:.1f} s); shared-clause pairs: {len(shared_pairs)}; "
          f"reworded questions: {len(reworded)}")
    print(f"{'check':28} {'variant':18} {'n':>4} {'r@1':>6} {'r@5':>6} {'mrr':>6}")
    for row in sorted(rows, key=lambda r: (r["check"], list(VARIANTS).index(r["variant"]))):
        print(f"{row['check']:28} {row['variant']:18} {row['n']:>4} {row['r@1']:>6.3f} "
              f"{row['r@5']:>6.3f} {row['mrr']:>6.3f}")


if __name__ == "__main__":
    asyncio.run(main())
