"""A ranking prior from recall feedback, measured on evaluation cases held out from the feedback
(issue 35, part 4). The prior is :mod:`shared.recall.feedback_prior` (pure re-ranking; not wired
into recall). There is no real usage data: feedback is simulated, as an attentive assistant
would give it, on the derived evaluation cases (:mod:`shared.evaluation.cases`) of one half,
and the other half is measured with and without the prior, case by case.

1. **Recalls** (``--cache`` keeps them): the 2,251 BIRD cards imported and projected
   (``bench/_archive.py``); every derived case (``solved``, ``search``, ``rules``) recalled as an
   evaluation run recalls it (:func:`shared.recall.verified.recall`, the mode's production
   profile, the case's filters and leave-one-out ``stand_in``, ``top`` 10), keeping every
   scored card, not only the first 10: recall's last step is wrapped so that it does not cut
   the list at ``top`` (the seeds are the ``top`` 10 recall's: 30 per branch). The first 10
   are what an assistant sees; the prior re-ranks the whole list, as it would if it were applied
   to the scores before the cut. And each question's dense query vector.
2. **Splits** into a FEEDBACK half and a HELD-OUT half, all cases of one question on one side:
   ``database``: FEEDBACK = the TUNE databases, HELD-OUT = the REPORT databases
   (``bench/README.md``); ``question``: by the first bit of the question's SHA-256, so both
   halves share every database.
3. **Feedback** on the FEEDBACK half: one recall record per (question, mode, filters); for each
   of its cases whose expected card is in the first 10, that card ``helpful`` and the cards
   ranked above it (not expected by a case of the record) ``not_helpful``; a case whose card
   is not in the first 10 gives nothing (the assistant cannot tell which card it needed).
   ``--flip`` (default 0.15): the noisy variant, each verdict flipped with that probability
   (by a hash, deterministic).
4. **Tuning, on the FEEDBACK half only**: it is cut in two by the question's second SHA-256 bit;
   feedback from one part, measured on the other, over a grid per prior. Rule, fixed before the
   run: the candidate with the largest Σ (gained - lost) over modes and r@1 / r@3 / r@5 among
   those with lost ≤ gained on every mode and cutoff; ties to the smaller strength; if none
   has, the largest Σ anyway (and the output says so).
5. **Measure** on the HELD-OUT half with the feedback of the whole FEEDBACK half and the tuned
   parameters: r@1 / r@3 / r@5 / MRR per mode without and with the prior, and per cutoff the
   paired exact McNemar test (:func:`shared.evaluation.figures.mcnemar_p`: lost, gained, p).

Run: ``.venv/bin/python bench/feedback_prior.py [--cache /tmp/feedback_prior.json]
[--flip 0.15] [--grid] [--json out.json]`` (``--grid``: every tuning candidate's lost / gained
on the FEEDBACK half, r@1 r@3 r@5 per mode) (a PostgreSQL superuser URL, see ``bench/_archive.py``; with an existing
``--cache`` the archive is not built and the run takes seconds).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from bench._archive import build  # noqa: E402
from shared.evaluation.figures import mcnemar_p  # noqa: E402
from shared.recall.feedback_prior import (PENALTY_ONLY, VERDICT_VALUE, card_prior,  # noqa: E402
                                          rerank, similar_prior)

MODES = ("solved", "search", "rules")
CUTOFFS = (1, 3, 5)
SHOWN = 10  # what the assistant saw: recall's default top
TUNE_DBS = {"california_schools", "codebase_community", "european_football_2", "formula_1",
            "superhero", "toxicology"}
REPORT_DBS = {"card_games", "debit_card_specializing", "financial", "student_club",
              "thrombosis_prediction"}
#: the tuning grids, fixed before the run
GRID_CARD = [{"strength": b, "smoothing": m} for b in (0.02, 0.05, 0.1, 0.2, 0.4)
             for m in (1.0, 3.0, 10.0)]
GRID_SIMILAR = [{"strength": b, "threshold": t, "smoothing": m} for b in (0.05, 0.1, 0.2, 0.4)
                for t in (0.5, 0.6, 0.7, 0.8, 0.9) for m in (0.5, 2.0)]
#: the priors measured: name -> (which, verdict values, grid)
KINDS = {"card": ("card", VERDICT_VALUE, GRID_CARD),
         "card, penalty only": ("card", PENALTY_ONLY, GRID_CARD),
         "similar": ("similar", VERDICT_VALUE, GRID_SIMILAR),
         "similar, penalty only": ("similar", PENALTY_ONLY, GRID_SIMILAR)}


# ---- 1. recalls ---------------------------------------------------------------------------

async def collect() -> dict[str, Any]:
    """Build the BIRD archive, recall every derived case, embed every question."""
    from shared.cards_file import bundled_cards, read_cards
    from shared.auth import Principal
    from shared.evaluation.cases import gather
    from shared.evaluation.run import QueryCache, _request
    from shared.models import PROJECTION_FORMAT, card_id_str
    from shared.recall import verified
    from shared.recall.profiles import MODE_PROFILES
    from shared.store import evaluations

    t0 = time.perf_counter()
    bench = await build("feedback_prior", read_cards(bundled_cards()), workspace="bird")
    res = bench.resources
    print(f"archive built in {time.perf_counter() - t0:.0f} s", flush=True)
    original = verified._rank_and_read

    async def uncut(conn, seeds, rows, flt, ranks, top, expand, t):  # type: ignore[no-untyped-def]
        return await original(conn, seeds, rows, flt, ranks, 1_000_000, expand, t)

    verified._rank_and_read = uncut  # type: ignore[assignment]
    try:
        async with res.db.transaction("bird", read_only=True) as conn:
            cases, _ = await gather(conn)
            solved = await evaluations.solved_cards(conn, PROJECTION_FORMAT)
        dbs = {card_id_str(r["id"]): sorted(r["databases"] or []) for r in solved}
        queries = QueryCache(res.embedder)
        principal = Principal(workspace="bird", permissions=frozenset({"memory.read"}),
                              actor="bench")
        out_cases: list[dict[str, Any]] = []
        results: dict[str, list[list[Any]]] = {}
        t1 = time.perf_counter()

        async def ask(case: Any) -> None:
            got = await verified.recall(res.db, res.index, queries, principal, "bird",
                                        _request(case, SHOWN), profile=MODE_PROFILES[case.mode],
                                        privacy=res.privacy, stand_in=case.stand_in)
            results[case.key] = [[r.card.id, r.score] for r in got.results]

        derived = [c for c in cases if c.source == "derived"]
        for at in range(0, len(derived), 2):
            await asyncio.gather(*(ask(c) for c in derived[at:at + 2]))
            if at % 200 == 0:
                print(f"  {at}/{len(derived)} cases, {time.perf_counter() - t1:.0f} s", flush=True)
        vectors = {}
        for case in derived:
            solved_id = case.key.split(":")[1]
            d = dbs.get(solved_id) or []
            out_cases.append({"key": case.key, "kind": case.kind, "mode": case.mode,
                              "question": case.question, "match": case.match,
                              "filters": case.filters.database if case.filters else None,
                              "expected": [card_id_str(e) for e in case.expected],
                              "database": d[0] if len(d) == 1 else None})
            if case.question not in vectors:
                dense, _ = await queries.embed_query(case.question[:2000], "en")
                vectors[case.question] = list(dense)
        print(f"{len(derived)} cases recalled in {time.perf_counter() - t1:.0f} s", flush=True)
        return {"cases": out_cases, "results": results, "vectors": vectors}
    finally:
        verified._rank_and_read = original  # type: ignore[assignment]
        await bench.close()


# ---- 2.-3. splits and feedback --------------------------------------------------------------

def _bit(text: str, n: int) -> int:
    return hashlib.sha256(text.encode()).digest()[n] & 1


def split(cases: list[dict[str, Any]], how: str) -> tuple[list[dict], list[dict]]:
    """(FEEDBACK, HELD-OUT) cases of the split ``how`` (module docstring)."""
    if how == "database":
        return ([c for c in cases if c["database"] in TUNE_DBS],
                [c for c in cases if c["database"] in REPORT_DBS])
    return ([c for c in cases if _bit(c["question"], 0) == 0],
            [c for c in cases if _bit(c["question"], 0) == 1])


def rank_of(case: dict[str, Any], ranked: list[str]) -> int | None:
    """As :func:`shared.evaluation.figures.case_rank` (derived cases: ``any``)."""
    pos = {cid: i for i, cid in enumerate(ranked, start=1)}
    hits = [pos[e] for e in case["expected"] if e in pos]
    return min(hits) if hits else None


def simulate(cases: list[dict[str, Any]], results: dict[str, list], flip: float = 0.0
             ) -> list[dict[str, Any]]:
    """Recall records with verdicts (module docstring, 3): ``{question, mode, verdicts}``."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for c in cases:
        groups[(c["question"], c["mode"], c["filters"])].append(c)
    records = []
    for (question, mode, _flt), group in groups.items():
        wanted = {e for c in group for e in c["expected"]}
        verdicts: dict[str, str] = {}
        for c in group:
            shown = [cid for cid, _ in results[c["key"]][:SHOWN]]
            r = rank_of(c, shown)
            if r is None:
                continue
            for cid in shown[:r - 1]:
                if cid not in wanted and verdicts.get(cid) != "helpful":
                    verdicts[cid] = "not_helpful"
            verdicts[shown[r - 1]] = "helpful"
        if flip:
            for cid, v in list(verdicts.items()):
                u = int.from_bytes(hashlib.sha256(f"{question}|{mode}|{cid}".encode()).digest()[:4],
                                   "big") / 2 ** 32
                if u < flip:
                    verdicts[cid] = "not_helpful" if v == "helpful" else "helpful"
        if verdicts:
            records.append({"question": question, "mode": mode, "verdicts": verdicts})
    return records


# ---- 4.-5. priors, measurement, tuning ----------------------------------------------------

class Priors:
    """The feedback records and the query vectors, to compute either prior for a case."""

    def __init__(self, records: list[dict[str, Any]], vectors: dict[str, list[float]]) -> None:
        self.records = records
        self.by_mode: dict[str, list[int]] = defaultdict(list)
        for i, r in enumerate(records):
            self.by_mode[r["mode"]].append(i)
        self.vectors = vectors
        if records:
            m = np.array([vectors[r["question"]] for r in records], dtype=np.float64)
            self.matrix = m / np.linalg.norm(m, axis=1, keepdims=True)
        self._card: dict[tuple, dict[str, float]] = {}
        self._sims: dict[str, np.ndarray] = {}

    def card(self, smoothing: float, values: dict[str, float]) -> dict[str, float]:
        key = (smoothing, tuple(sorted(values.items())))
        if key not in self._card:
            self._card[key] = card_prior((r["verdicts"] for r in self.records), smoothing,
                                         values)
        return self._card[key]

    def similar(self, question: str, mode: str, threshold: float,
                smoothing: float, values: dict[str, float]) -> dict[str, float]:
        if not self.records:
            return {}
        if question not in self._sims:
            q = np.array(self.vectors[question], dtype=np.float64)
            self._sims[question] = self.matrix @ (q / np.linalg.norm(q))
        sims = self._sims[question]
        pairs = [(float(sims[i]), self.records[i]["verdicts"]) for i in self.by_mode[mode]
                 if sims[i] >= threshold and self.records[i]["question"] != question]
        return similar_prior(pairs, threshold, smoothing, values)


def ranks(cases: list[dict[str, Any]], results: dict[str, list], priors: Priors | None,
          kind: str, params: dict[str, float]) -> dict[str, int | None]:
    """Each case's rank, without the prior (``priors`` None) or with prior ``kind``."""
    out = {}
    which, values = KINDS[kind][:2] if kind else ("", VERDICT_VALUE)
    for c in cases:
        scored = [(cid, s) for cid, s in results[c["key"]]]
        if priors is not None:
            prior = (priors.card(params["smoothing"], values) if which == "card" else
                     priors.similar(c["question"], c["mode"], params["threshold"],
                                    params["smoothing"], values))
            scored = rerank(scored, prior, params["strength"])
        out[c["key"]] = rank_of(c, [cid for cid, _ in scored])
    return out


def compare(cases: list[dict[str, Any]], before: dict, after: dict) -> dict[str, Any]:
    """Per mode: figures before/after and per cutoff lost / gained / p."""
    out: dict[str, Any] = {}
    for mode in MODES:
        keys = [c["key"] for c in cases if c["mode"] == mode]
        if not keys:
            continue
        row: dict[str, Any] = {"n": len(keys)}
        for name, got in (("without", before), ("with", after)):
            rs = [got[k] for k in keys]
            row[name] = {**{f"r{k}": sum(1 for r in rs if r is not None and r <= k) / len(rs)
                            for k in CUTOFFS},
                         "mrr": sum(1 / r for r in rs if r is not None) / len(rs)}
        for k in CUTOFFS:
            def hit(r: int | None) -> bool:
                return r is not None and r <= k
            lost = sum(1 for key in keys if hit(before[key]) and not hit(after[key]))
            gained = sum(1 for key in keys if hit(after[key]) and not hit(before[key]))
            row[f"k{k}"] = {"lost": lost, "gained": gained, "p": mcnemar_p(lost, gained)}
        out[mode] = row
    return out


def tune(fb_cases: list[dict], results: dict, vectors: dict, kind: str, grid: bool = False
         ) -> tuple[dict[str, float], dict[str, Any], bool, dict[str, float], int]:
    """The tuning rule (module docstring, 4) on the FEEDBACK half: (parameters, their
    comparison on the inner measured part, whether the constraint was met) and, for the record,
    the parameters with the largest Σ (gained - lost) ignoring the constraint, with that sum."""
    inner_fb = [c for c in fb_cases if _bit(c["question"], 1) == 0]
    inner_eval = [c for c in fb_cases if _bit(c["question"], 1) == 1]
    priors = Priors(simulate(inner_fb, results), vectors)
    base = ranks(inner_eval, results, None, kind, {})
    best = None
    most: tuple | None = None
    for params in KINDS[kind][2]:
        cmp = compare(inner_eval, base, ranks(inner_eval, results, priors, kind, params))
        net = sum(m[f"k{k}"]["gained"] - m[f"k{k}"]["lost"] for m in cmp.values() for k in CUTOFFS)
        safe = all(m[f"k{k}"]["lost"] <= m[f"k{k}"]["gained"] for m in cmp.values()
                   for k in CUTOFFS)
        if grid:
            print(f"    {kind}: {_short(params)}: net {net:+d}; " + "; ".join(
                f"{m} " + " ".join(f"{r[f'k{k}']['lost']}/{r[f'k{k}']['gained']}"
                                   for k in CUTOFFS) for m, r in cmp.items()))
        key = (safe, net, -params["strength"])
        if best is None or key > best[0]:
            best = (key, params, cmp)
        if most is None or (net, -params["strength"]) > most[0]:
            most = ((net, -params["strength"]), params)
    assert best is not None and most is not None
    return best[1], best[2], best[0][0], most[1], most[0][0]


def fmt_row(split_name: str, prior: str, feedback: str, mode: str, row: dict[str, Any]) -> str:
    w, x = row["without"], row["with"]
    figs = " | ".join(f"{w[f]:.3f} → {x[f]:.3f}" for f in ("r1", "r3", "r5", "mrr"))
    tests = " | ".join(f"{row[f'k{k}']['lost']}/{row[f'k{k}']['gained']}, "
                       f"p={row[f'k{k}']['p']:.3g}" for k in CUTOFFS)
    return f"| {split_name} | {prior} | {feedback} | {mode} | {row['n']} | {figs} | {tests} |"


def analyse(data: dict[str, Any], flip: float, grid: bool = False) -> dict[str, Any]:
    cases, results, vectors = data["cases"], data["results"], data["vectors"]
    print(f"{len(cases)} derived cases: " + ", ".join(
        f"{m} {sum(1 for c in cases if c['mode'] == m)}" for m in MODES)
        + f"; without a single database: {sum(1 for c in cases if c['database'] is None)}")
    base_all = ranks(cases, results, None, "", {})
    print("baseline over every case (the evaluation's r@k; MRR from the 30-seed list):",
          json.dumps({m: {k: round(v, 3) if isinstance(v, float) else v
                          for k, v in row["without"].items()}
                      for m, row in compare(cases, base_all, base_all).items()}))
    header = ("| split | prior | feedback | mode | held-out cases | r@1 | r@3 | r@5 | MRR "
              "| r@1 lost/gained, p | r@3 lost/gained, p | r@5 lost/gained, p |")
    rows: list[str] = []
    summary: dict[str, Any] = {}
    for how in ("database", "question"):
        fb, held = split(cases, how)
        print(f"\nsplit {how}: FEEDBACK {len(fb)} cases ({len({c['question'] for c in fb})} "
              f"questions), HELD-OUT {len(held)} ({len({c['question'] for c in held})})")
        base = ranks(held, results, None, "", {})
        for label, f in (("clean", 0.0), (f"flip {flip:g}", flip)):
            records = simulate(fb, results, f)
            print(f"  feedback {label}: {len(records)} recall records, "
                  f"{sum(len(r['verdicts']) for r in records)} verdicts, "
                  f"{sum(v == 'helpful' for r in records for v in r['verdicts'].values())} helpful")
        for kind in KINDS:
            params, inner, safe, most, net = tune(fb, results, vectors, kind, grid)
            print(f"  tuned {kind!r} on the FEEDBACK half: {params}"
                  f"{'' if safe else ' (no candidate met lost <= gained everywhere)'}; inner: "
                  + "; ".join(f"{m} " + " ".join(f"r@{k} {r[f'k{k}']['lost']}/{r[f'k{k}']['gained']}"
                                                   for k in CUTOFFS) for m, r in inner.items())
                  + f"; largest net ignoring the constraint: {most} (net {net})")
            for which, chosen in (("tuned", params), ("largest net", most)):
                if which == "largest net" and chosen == params:
                    continue
                for label, f in (("clean", 0.0), (f"flip {flip:g}", flip)):
                    priors = Priors(simulate(fb, results, f), vectors)
                    cmp = compare(held, base, ranks(held, results, priors, kind, chosen))
                    summary[f"{how}/{kind}/{which}/{label}"] = {"params": chosen, "modes": cmp}
                    for mode, row in cmp.items():
                        rows.append(fmt_row(how, f"{kind} ({which}) {_short(chosen)}", label,
                                            mode, row))
    print("\n" + header)
    print("|" + " --- |" * 12)
    print("\n".join(rows))
    print("\n" + decide(summary))
    return summary


def _short(params: dict[str, float]) -> str:
    names = {"strength": "β", "smoothing": "m", "threshold": "t"}
    return " ".join(f"{names[k]}={v:g}" for k, v in params.items())


def decide(summary: dict[str, Any]) -> str:
    """The issue's rule, as this bench reads it: a prior qualifies when, on both splits with the
    clean feedback, no mode and cutoff lost more than it gained with p < 0.05 (the evaluation's
    regression rule) and at least one did the reverse (gained > lost, p < 0.05)."""
    lines = []
    for kind in KINDS:
        harms, helps = [], []
        for how in ("database", "question"):
            for mode, row in summary[f"{how}/{kind}/tuned/clean"]["modes"].items():
                for k in CUTOFFS:
                    t = row[f"k{k}"]
                    tag = f"{how} {mode} r@{k} lost {t['lost']} gained {t['gained']} p={t['p']:.3g}"
                    if t["lost"] > t["gained"] and t["p"] < 0.05:
                        harms.append(tag)
                    if t["gained"] > t["lost"] and t["p"] < 0.05:
                        helps.append(tag)
        ok = helps and not harms
        lines.append(f"{kind}: {'QUALIFIES' if ok else 'does not qualify'}; significant gains: "
                     f"{helps or 'none'}; significant losses: {harms or 'none'}")
    return "\n".join(lines)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", type=Path, help="keep (or reuse) the recalls in this JSON file")
    ap.add_argument("--flip", type=float, default=0.15,
                    help="share of verdicts flipped in the noisy variant (default 0.15)")
    ap.add_argument("--json", type=Path, help="write the figures to this JSON file")
    ap.add_argument("--grid", action="store_true",
                    help="print every tuning candidate's lost/gained on the FEEDBACK half")
    args = ap.parse_args()
    if args.cache and args.cache.exists():
        data = json.loads(args.cache.read_text())
    else:
        data = await collect()
        if args.cache:
            args.cache.write_text(json.dumps(data))
    summary = analyse(data, args.flip, args.grid)
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    asyncio.run(main())
