"""Offline exploration of ways to reach a clarification or rule through the solved questions
that used it (issue 13's "knowledge reached through exemplars"), on BIRD clause recall (a)'s
leave-one-out folds and TUNE / REPORT databases (``bench/recall_quality.py``), dense vectors only.

Not the product's code path: numpy over fastembed vectors of the same model, the candidate
clauses of the question's database (clarifications, rules, explained errors: ``search`` mode's
families, database filter), no BM25, no verification. It ranks routes against each other
cheaply before one is built into the projection; its figures are not comparable with
``recall_quality.py``'s (which fuses BM25 and the key vectors too). Run:
``.venv/bin/python bench/explore_clause_routes.py`` (about 5 minutes on a quiet machine; no
database needed).

Routes (cosine similarity of the question's vector with):

- ``own``: the clause's own text (format 2's text; the peers' dense branch).
- ``expanded``: the clause's text followed by the questions of the fold's solved cards that
  link to it, one vector (format 3's ``dense``: document expansion).
- ``exemplar``: the best of the linking questions' own vectors (max-sim over one vector per
  linking question, what a multi-vector "exemplars" field would give); a clause no kept
  question links to gets nothing from it.
- ``a + w·b``: DBSF-style sum of the routes' scores, each normalised over the candidates
  (``(s - (μ - 3σ)) / 6σ``); ``a + w·max(0, exemplar - t)``: a bonus only above a similarity
  threshold; ``a | slot k``: ranking ``a`` with the best exemplar clause (not already above)
  put at rank ``k``.

Columns: r@1 / r@5 on TUNE all pairs, TUNE shared clauses (linked by two or more BIRD
questions), REPORT all, REPORT shared.
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._archive import model_env  # noqa: E402
from bench.recall_quality import BIRD_REPORT, _database_of, bird_cards  # noqa: E402
from shared.config import load_settings  # noqa: E402
from shared.index.embedding import Embedder  # noqa: E402
from shared.projection.documents import MAX_LINKED_QUESTIONS  # noqa: E402

SEARCH_FAMILIES = ("domain_clarification", "sql_rule", "explained_error")


def card_text(card) -> str:  # noqa: ANN001 - an ImportCard
    """The clause's own text as the projection writes it (title, content fields, scope,
    concepts; dependency names left out, which the candidates share within a database)."""
    parts = [card.title] + [v for v in card.content.values() if v]
    if card.scope:
        parts.append(f"scope: {card.scope}")
    if card.concepts:
        parts.append("concepts: " + ", ".join(card.concepts))
    return "\n".join(parts)


def z(x: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """DBSF's normalisation over the candidates (those in ``mask``; the others get 0)."""
    v = x if mask is None else x[mask]
    if v.size == 0:
        return np.zeros_like(x)
    mu, sd = v.mean(), v.std() + 1e-9
    out = (x - (mu - 3 * sd)) / (6 * sd)
    return out if mask is None else np.where(mask, out, 0.0)


def with_slot(ranking: list[int], exemplar_order: list[int], k: int) -> list[int]:
    """``ranking`` with the best exemplar clause not in its first ``k - 1`` put at rank ``k``."""
    out = ranking[:k - 1]
    for c in exemplar_order:
        if c not in out:
            out.append(c)
            break
    return out + [c for c in ranking if c not in out]


def main() -> None:
    t0 = time.perf_counter()
    embedder = Embedder(load_settings(model_env()))
    cards = bird_cards()
    solved = [c for c in cards if c.family == "solved_question"]
    clauses = [c for c in cards if c.family in SEARCH_FAMILIES]
    users: dict[str, list[str]] = defaultdict(list)
    for s in solved:
        for link in s.links:
            users[link.target].append(s.key)
    by_key = {c.key: c for c in cards}
    clause_index = {c.key: i for i, c in enumerate(clauses)}
    solved_index = {s.key: i for i, s in enumerate(solved)}
    clause_db = np.array([_database_of(c) for c in clauses])

    def embed(texts: list[str]) -> np.ndarray:
        return np.array(embedder.embed_dense_sync(texts, "en"))

    questions = embed([s.content["question"] for s in solved])
    own_vectors = embed([card_text(c) for c in clauses])
    q_q, q_own = questions @ questions.T, questions @ own_vectors.T
    res: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    names: list[str] = []
    for fold in (0, 1):
        kept = {s.key for i, s in enumerate(solved) if i % 2 == fold}
        linking = [[solved_index[u] for u in users[c.key] if u in kept] for c in clauses]
        expanded = embed(["\n".join([card_text(c)] + [by_key[solved[j].key].content["question"]
                                                       for j in linking[i][:MAX_LINKED_QUESTIONS]])
                          for i, c in enumerate(clauses)])
        q_exp = questions @ expanded.T
        for s in solved:
            if s.key in kept:
                continue
            db = _database_of(s)
            half = "REPORT" if db in BIRD_REPORT else "TUNE"
            qi = solved_index[s.key]
            cand = np.where(clause_db == db)[0]
            own, exp = q_own[qi, cand], q_exp[qi, cand]
            has = np.array([bool(linking[i]) for i in cand])
            ex = np.array([q_q[qi, linking[i]].max() if linking[i] else -1.0 for i in cand])
            scores = {
                "own": own, "expanded": exp, "exemplar": np.where(has, ex, -2.0),
                "own + expanded": z(own) + z(exp),
                "own + 1·exemplar": z(own) + z(ex, has),
                "expanded + 0.5·exemplar": z(exp) + 0.5 * z(ex, has),
                "own + expanded + 0.5·exemplar": z(own) + z(exp) + 0.5 * z(ex, has),
            }
            for t in (0.6, 0.7, 0.8):
                scores[f"own + 2·max(0, exemplar - {t})"] = own + 2 * np.maximum(0, ex - t)
                scores[f"own + expanded + 4·max(0, exemplar - {t})"] = (
                    z(own) + z(exp) + 4 * np.maximum(0, ex - t))
            rankings = {name: [int(c) for c in cand[np.argsort(-v, kind="stable")]]
                        for name, v in scores.items()}
            exemplar_order = [int(c) for c in cand[np.lexsort((-exp, -ex))]
                              if ex[list(cand).index(c)] > -1]
            for base in ("own", "expanded", "own + expanded"):
                for k in (4, 5):
                    rankings[f"{base} | slot {k}"] = with_slot(rankings[base], exemplar_order, k)
            names = list(rankings)
            for link in s.links:
                if link.target not in clause_index:
                    continue
                kind = "shared" if len(users[link.target]) >= 2 else "other"
                for name, ranking in rankings.items():
                    r = ranking.index(clause_index[link.target]) + 1
                    res[(half, kind, name)].append(r)
                    res[(half, "all", name)].append(r)
    print(f"{'route':46} {'TUNE all':>13} {'TUNE shared':>13} {'REPORT all':>13} "
          f"{'REPORT shared':>13}")
    for name in names:
        cells = []
        for half in ("TUNE", "REPORT"):
            for kind in ("all", "shared"):
                v = np.array(res[(half, kind, name)])
                cells.append(f"{(v == 1).mean():.3f}/{(v <= 5).mean():.3f}")
        print(f"{name:46} " + " ".join(f"{c:>13}" for c in cells))
    n = {f"{h} {k}": len(res[(h, k, "own")]) for h in ("TUNE", "REPORT") for k in ("all", "shared")}
    print(f"pairs: {n}; {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
