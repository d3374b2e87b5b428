"""The specificity prior of issue 42, section 2: how much a card whose own dependency matches a
recall's database/table filter should come before a workspace-wide card (no dependencies: the
79 sqlfluff lint rules of the bundled BIRD cards).

The bundled BIRD cards are imported and projected once (``bench/_archive.py``). The workspace's
own derived cases (:func:`shared.evaluation.cases.gather`, with their leave-one-out) that carry a
database filter (the ``linked`` cases whose solved question names one database) are recalled
through :func:`shared.recall.verified.recall` (and again narrowed to the expected card's table
when its dependencies name one table of that database, as a caller naming a table asks) with the
production profile of their mode and
``specificity`` = each candidate weight, all in this one run. The cases are split by database:
the databases sorted by name, even index TUNE, odd REPORT (``bench/README.md``'s split). The
weight is chosen on TUNE
only (the best r@3 summed over ``search`` and ``rules``, then MRR; the smallest weight on a tie),
and REPORT gives its figures beside the production profile's (weight 0), with the exact McNemar
test of r@3 (``shared.evaluation.figures.mcnemar_p``) and the share of workspace-wide cards among
each recall's first five results.

Run: ``.venv/bin/python bench/specificity.py`` (about 6 minutes on 2 cores).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._archive import build  # noqa: E402
from shared.auth import Principal  # noqa: E402
from shared.cards_file import bundled_cards, read_cards  # noqa: E402
from shared.evaluation.cases import gather  # noqa: E402
from shared.evaluation.figures import case_rank, mcnemar_p  # noqa: E402
from shared.models import SearchRequest, card_id_str  # noqa: E402
from shared.recall.profiles import MODE_PROFILES  # noqa: E402
from shared.recall.verified import recall  # noqa: E402
from shared.store import cards as card_rows  # noqa: E402

WEIGHTS = (0.0, 0.1, 0.25, 0.5, 1.0)
TOP = 100


def _figures(ranks: list[int | None]) -> dict[str, float]:
    n = len(ranks) or 1
    at = {k: sum(1 for r in ranks if r is not None and r <= k) / n for k in (1, 3, 5)}
    return {"n": len(ranks), "r1": round(at[1], 3), "r3": round(at[3], 3), "r5": round(at[5], 3),
            "mrr": round(sum(1 / r for r in ranks if r is not None) / n, 3)}


async def main() -> None:
    bench = await build("specificity", read_cards(bundled_cards()), workspace="bird")
    res = bench.resources
    try:
        async with res.db.transaction("bird") as conn:
            cases, _ = await gather(conn)
            every = await card_rows.get_many(conn, list(await card_rows.revisions(conn)))
            wide = {card_id_str(cid) for cid, card in every.items() if not card.dependencies}
        filtered = [c for c in cases if c.source == "derived" and c.filters is not None
                    and c.filters.database and c.mode in ("search", "rules")]
        # the same cases narrowed to a table, as a caller that names one asks (the issue's
        # {"database": "shop", "table": "orders"}): the table of the expected card's dependency
        # when it names exactly one table of the case's database
        async with res.db.transaction("bird") as conn:
            expected = await card_rows.get_many(conn, [c.expected[0] for c in filtered])
        for c in list(filtered):
            tables = {(d.schema, d.table) for d in expected[c.expected[0]].dependencies
                      if d.database == c.filters.database and d.table}
            if len(tables) == 1:
                schema, table = next(iter(tables))
                filtered.append(msgspec.structs.replace(
                    c, key=c.key + ":table", filters=msgspec.structs.replace(
                        c.filters, schema=schema, table=table)))
        databases = sorted({c.filters.database for c in filtered})
        tune_dbs = set(databases[0::2])  # bench/README's BIRD TUNE: even index by name
        principal = Principal(workspace="bird", permissions=frozenset({"memory.read"}),
                              actor="bench")
        ranks: dict[float, dict[str, int | None]] = {}
        wide_share: dict[float, dict[str, list[float]]] = {}
        for weight in WEIGHTS:
            ranks[weight], wide_share[weight] = {}, {
                (split, kind): [] for split in ("TUNE", "REPORT") for kind in ("database", "table")}
            for case in filtered:
                profile = msgspec.structs.replace(MODE_PROFILES[case.mode], specificity=weight)
                response = await recall(res.db, res.index, res.embedder, principal, "bird",
                                        SearchRequest(query=case.question[:2000], top=TOP,
                                                      mode=case.mode, filters=case.filters),
                                        profile=profile, stand_in=case.stand_in)
                ids = [r.card.id for r in response.results]
                ranks[weight][case.key] = case_rank(case, ids)
                split = "TUNE" if case.filters.database in tune_dbs else "REPORT"
                kind = "table" if case.filters.table is not None else "database"
                first = [r.card.id for r in response.results[:5]]
                wide_share[weight][(split, kind)].append(
                    sum(1 for cid in first if cid in wide) / max(1, len(first)))

        def figures_of(weight: float, split: str, mode: str, kind: str | None = None
                       ) -> dict[str, float]:
            return _figures([ranks[weight][c.key] for c in filtered if c.mode == mode and (
                (c.filters.database in tune_dbs) == (split == "TUNE")) and (
                kind is None or (c.filters.table is not None) == (kind == "table"))])

        def tune_key(weight: float) -> tuple[float, float, float]:
            got = [figures_of(weight, "TUNE", m) for m in ("search", "rules")]
            return (sum(g["r3"] for g in got), sum(g["mrr"] for g in got), -weight)

        chosen = max(WEIGHTS, key=tune_key)
        print(json.dumps({"databases": {"TUNE": sorted(tune_dbs),
                                        "REPORT": sorted(set(databases) - tune_dbs)},
                          "cases": len(filtered), "chosen_on_tune": chosen}))
        print("| split | weight | search r@1 / r@3 / r@5 / MRR | rules r@1 / r@3 / r@5 / MRR "
              "| workspace-wide share of the top 5 |")
        print("| --- | --- | --- | --- | --- |")
        for split, kind in (("TUNE", "database"), ("TUNE", "table"), ("REPORT", "database"),
                            ("REPORT", "table")):
            for weight in WEIGHTS:
                cells = []
                for mode in ("search", "rules"):
                    f = figures_of(weight, split, mode, kind)
                    cells.append(f"{f['r1']:.3f} / {f['r3']:.3f} / {f['r5']:.3f} / {f['mrr']:.3f}"
                                 f" ({f['n']})")
                share = wide_share[weight][(split, kind)]
                mark = " **chosen**" if weight == chosen else ""
                print(f"| {split}, {kind} filter | {weight:g}{mark} | {cells[0]} | {cells[1]} | "
                      f"{sum(share) / max(1, len(share)):.3f} |")
        for mode, kind in (("search", "database"), ("search", "table"), ("rules", "database"),
                           ("rules", "table")):
            keys = [c.key for c in filtered if c.mode == mode
                    and c.filters.database not in tune_dbs
                    and (c.filters.table is not None) == (kind == "table")]
            for k in (1, 3, 5):
                def hit(r: int | None) -> bool:
                    return r is not None and r <= k
                lost = sum(1 for key in keys if hit(ranks[0.0][key]) and not hit(ranks[chosen][key]))
                gained = sum(1 for key in keys if hit(ranks[chosen][key]) and not hit(ranks[0.0][key]))
                print(json.dumps({"split": "REPORT", "filter": kind, "mode": mode, "k": k, "lost": lost,
                                  "gained": gained, "p": round(mcnemar_p(lost, gained), 5)}))
    finally:
        await bench.close()


if __name__ == "__main__":
    asyncio.run(main())
