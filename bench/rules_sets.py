"""Rules mode on more than one kind of rule (issue 27): every set of ``bench/rule_sets_data.py``
(``evidence``: BIRD evidence clauses with near-duplicate siblings; ``procedures``: BIRD gold SQL
rendered as procedures; ``lint``: sqlfluff rules asked with anti-pattern code), each imported and
projected by the product into its own archive, asked through the code path of ``POST /search``
(``shared.recall.verified.recall``, as ``bench/recall_quality.py``) in ``rules`` mode with the
product's profile next to the peers (dense only, BM25 only, RRF k=60, DBSF on a format-2 index
of the same cards), on the TUNE and REPORT halves, r@1 and r@3 (top 10 asked). Run:
``.venv/bin/python bench/rules_sets.py [--sets evidence,procedures,critic,lint] [--limit N]
[--half TUNE|REPORT] [--json]``.

``--limit N``: an evenly spread sample of about N queries per set (the same sample on every run).
``--candidate LABEL``: one more configuration, the product's index under a candidate profile of
``bench/tune_rules_sets.py`` (its printed label, e.g. ``"dbsf c=1.5 0/1/3/1.5"``).
``--sets bird-a``: the BIRD clause pairs in ``rules`` mode (``rules_branch_cache.bird_a_folds``:
both folds' archives; tags ``db`` and ``ws``).
``--text rule``: the cards' title is replaced by the rule itself (the title repeats the rule,
as BIRD's bundled cards do) -- issue 27's "what the rule's text is".
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

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.recall_quality import PEERS, PRODUCT, QueryCache, compared  # noqa: E402
from bench.rule_sets_data import RuleSet, all_sets  # noqa: E402
from bench.rules_branch_cache import bird_a_folds  # noqa: E402
from bench.tune_rules_sets import parse_candidate  # noqa: E402
from shared.models import Filters, SearchRequest  # noqa: E402
from shared.recall.verified import recall  # noqa: E402
from tools.bird_cards import make_title  # noqa: E402

CONFIGS = [PRODUCT, *PEERS]
CANDIDATE = "candidate"


async def ranks_of(pair: Any, query: str, wanted: list[str], database: str | None,
                   candidate: Any = None) -> dict[str, list[int | None]]:
    """Rank (top 10) of each of ``wanted`` under the product's ``rules`` profile, each peer and
    (``candidate``: a :class:`FusionProfile`) a candidate profile on the product's index: one
    recall per configuration for all the query's wanted rules."""
    res = pair.bench.resources
    req = SearchRequest(query=query, top=10, mode="rules",
                        filters=Filters(database=database) if database else None)
    cache = QueryCache(res.embedder)
    out: dict[str, list[int | None]] = {}
    got = await recall(res.db, res.index, cache, pair.bench.principal, pair.bench.workspace, req)
    out[PRODUCT] = _ranks(got, wanted)
    if candidate is not None:
        got = await recall(res.db, res.index, cache, pair.bench.principal, pair.bench.workspace,
                           req, profile=candidate)
        out[CANDIDATE] = _ranks(got, wanted)
    peer = cache.index(pair.peer)
    for name, profile in PEERS.items():
        got = await recall(res.db, peer, cache, pair.bench.principal, pair.bench.workspace, req,
                           profile=profile, layout=pair.peer_layout)
        out[name] = _ranks(got, wanted)
    return out


def _ranks(response: Any, wanted: list[str]) -> list[int | None]:
    ids = [r.card.id for r in response.results]
    return [ids.index(w) + 1 if w in ids else None for w in wanted]


def recall_at(ranks: list[int | None], k: int) -> float:
    """Share of ``ranks`` at or above ``k`` (0.0 for no ranks)."""
    return sum(1 for r in ranks if r and r <= k) / len(ranks) if ranks else 0.0


def title_is_rule(rule_set: RuleSet) -> RuleSet:
    """The set with every card's title replaced by its rule (cut to a title's length)."""
    cards = [msgspec.structs.replace(c, title=make_title(c.content["rule"]))
             for c in rule_set.cards]
    return RuleSet(rule_set.name, cards, rule_set.queries)


async def run_set(rule_set: RuleSet, limit: int | None, prefix: str, half: str | None = None,
                  candidate: Any = None, name: str | None = None) -> dict[str, dict[str, list]]:
    """``{check: {config: ranks}}`` of one set (``half``: only that half's queries); checks are
    ``<set> <half>`` and ``<set> <half> <tag>`` (``name``: the set's name in them, default the
    rule set's)."""
    name = name or rule_set.name
    pair, by_key = await compared(f"{prefix}{rule_set.name}", rule_set.cards)
    per: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    queries = [q for q in rule_set.queries if half in (None, q.half)]
    if limit:
        queries = queries[::max(1, len(queries) // limit)]
    grouped: dict[tuple, list] = defaultdict(list)
    for q in queries:  # one recall per distinct (text, filter) for all its wanted rules
        grouped[(q.text, q.database)].append(q)
    try:
        t0 = time.perf_counter()
        for (text, database), qs in grouped.items():
            got = await ranks_of(pair, text, [by_key[q.wanted] for q in qs], database,
                                 candidate)
            for i, q in enumerate(qs):
                for check in [f"{name} {q.half}", *(f"{name} {q.half} {t}" for t in q.tags)]:
                    for config, ranks in got.items():
                        per[check][config].append(ranks[i])
        print(f"  {rule_set.name}: {len(queries)} pairs, {len(grouped)} recalls per config in "
              f"{time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    finally:
        await pair.close()
    return per


def table(rows: list[dict], configs: list[str]) -> str:
    """Markdown table: one line per check, ``r@1 / r@3`` per configuration."""
    head = "| check | n | " + " | ".join(configs) + " |"
    lines = [head, "|" + " --- |" * (len(configs) + 2)]
    for row in rows:
        cells = [f"{row[c]['r@1']:.3f} / {row[c]['r@3']:.3f}" for c in configs]
        lines.append(f"| {row['check']} | {row['n']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


async def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default="evidence,procedures,critic,lint,bird-a",
                    help="comma-separated sets (default: all five)")
    ap.add_argument("--candidate", default=None,
                    help="a candidate profile's label of tune_rules_sets.py, run as one more "
                         "configuration")
    ap.add_argument("--limit", type=int, default=None, help="about N queries per set")
    ap.add_argument("--text", choices=["title", "rule"], default="title",
                    help="card title as built (title) or the rule repeated (rule)")
    ap.add_argument("--half", choices=["TUNE", "REPORT"], default=None,
                    help="only this half's queries (default both)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    wanted = args.sets.split(",")
    candidate = parse_candidate(args.candidate) if args.candidate else None
    configs = CONFIGS + ([CANDIDATE] if candidate else [])
    t0 = time.perf_counter()
    rows: list[dict] = []
    runs = [(s, s.name) for s in all_sets() if s.name in wanted]
    runs += [(fold, "bird-a") for fold in bird_a_folds()] if "bird-a" in wanted else []
    merged: dict[str, dict[str, dict[str, list]]] = {}
    for rule_set, name in runs:
        if args.text == "rule":
            rule_set = title_is_rule(rule_set)
        per = await run_set(rule_set, args.limit, f"rs_{args.text}_", args.half, candidate, name)
        for check, by_config in per.items():
            for config, ranks in by_config.items():
                merged.setdefault(check, {}).setdefault(config, []).extend(ranks)
    for check in sorted(merged):
        per_check = merged[check]
        rows.append({"check": check, "n": len(per_check[PRODUCT]), **{
            c: {"r@1": recall_at(per_check[c], 1), "r@3": recall_at(per_check[c], 3)}
            for c in configs}})
    if args.json:
        print(json.dumps({"seconds": round(time.perf_counter() - t0), "rows": rows}, indent=1))
    else:
        print(table(rows, configs))
        print(f"({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    asyncio.run(main())
