"""Reciprocal rank fusion of the dense and BM25 rankings (DESIGN §5 step 1).

``score(d) = Σ_b w_b / (k + rank_b(d))`` with 1-based ranks and ``k = 60``, set here rather than
left to the engine's default constant: G. V. Cormack, C. L. A. Clarke and S. Büttcher,
"Reciprocal Rank Fusion outperforms Condorcet and individual rank learning methods", SIGIR 2009.
"""

from __future__ import annotations

import uuid

RRF_K = 60


def rrf_fuse(rankings: list[list[uuid.UUID]], weights: list[float] | None = None,
             k: int = RRF_K) -> list[tuple[uuid.UUID, float]]:
    """Reciprocal rank fusion of best-first rankings: ``score(d) = Σ_b w_b / (k + rank_b(d))``
    with 1-based ranks (Cormack et al., SIGIR 2009). A branch of weight 0 is left out entirely
    (single-branch baselines). Ties break by id. Returns (id, score) best first."""
    weights = weights or [1.0] * len(rankings)
    scores: dict[uuid.UUID, float] = {}
    for ranking, w in zip(rankings, weights):
        if w == 0:  # a branch switched off contributes no candidates at all
            continue
        for rank, doc in enumerate(ranking, start=1):
            scores[doc] = scores.get(doc, 0.0) + w / (k + rank)
    return sorted(scores.items(), key=lambda item: (-item[1], str(item[0])))
