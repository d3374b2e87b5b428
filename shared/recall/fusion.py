"""Fusion of the branch rankings of a hybrid query (DESIGN §5 step 1): weighted reciprocal rank
fusion and distribution-based score fusion, with the weights of a retrieval profile.

- Reciprocal rank fusion: ``score(d) = Σ_b w_b / (k + rank_b(d))`` with 1-based ranks and ``k``
  set here rather than left to the engine's default constant: G. V. Cormack, C. L. A. Clarke and
  S. Büttcher, "Reciprocal Rank Fusion outperforms Condorcet and individual rank learning
  methods", SIGIR 2009.
- Distribution-based score fusion (DBSF): each branch's raw scores are normalised by that
  branch's own score distribution over the hits it returned, ``(s - (μ - 3σ)) / 6σ``, then
  summed with the weights: M. Mazzeschi, "Distribution-based Score Fusion (DBSF), a new approach
  to Vector Search Ranking" (2023), as Qdrant implements it (``Fusion.DBSF``; Qdrant clips the
  normalised score to [0, 1], ``clip=True`` here). A branch whose scores are all equal gives each
  of its hits 0.5.
- Confidence weighting (optional, DBSF only): per query, each branch's weight is multiplied by
  ``1 + c × gap``, where ``gap = (s₁ - s₂) / σ`` is how far the branch's best hit stands above its
  second, in units of that branch's score standard deviation over its returned hits (0 for a
  branch with fewer than two hits or σ = 0). A branch that singles out one card speaks louder
  for that query than one whose top hits are level. ``c = 0`` is plain DBSF.

A card missing from a branch gets nothing from it; a branch of weight 0 contributes no
candidates at all (single-branch baselines). Ties break by the card id's text.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping, Sequence
from typing import Literal

import msgspec

RRF_K = 60

FusionMethod = Literal["rrf", "dbsf"]


class FusionProfile(msgspec.Struct, frozen=True, kw_only=True):
    """How one recall mode fuses its branches: the method, a weight per named vector (branches
    absent or of weight 0 are not queried), RRF's ``k`` (ignored by DBSF), DBSF's ``clip`` and
    ``confidence`` (the per-query weighting ``c`` of the module docstring; ignored by RRF)."""

    method: FusionMethod = "rrf"
    weights: dict[str, float]
    k: float = RRF_K
    clip: bool = False
    confidence: float = 0.0
    #: the bounded specificity prior (issue 42): under a physical filter, a verified candidate's
    #: fused score (when positive) is multiplied by ``1 + specificity × s``, ``s`` in [0, 1] the
    #: share of the filter's named levels that the card's own best matching dependency names
    #: (:func:`shared.recall.eligibility.specificity`; 0 for a workspace-wide card). 0: off.
    specificity: float = 0.0

    def branches(self) -> tuple[str, ...]:
        """The named vectors this profile queries (weight > 0), in a stable order."""
        return tuple(sorted(name for name, w in self.weights.items() if w > 0))

    def describe(self) -> str:
        """The fusion in words, as the API's and the manual's texts quote it: the method and each
        queried branch with its weight, e.g. ``distribution-based score fusion (DBSF) of
        bm25 ×0.75, dense ×1, key ×1``."""
        method = (f"reciprocal rank fusion (RRF, k = {self.k:g})" if self.method == "rrf"
                  else "distribution-based score fusion (DBSF)")
        if self.method == "dbsf" and self.confidence:
            method = ("distribution-based score fusion (DBSF) with per-query confidence "
                      f"weighting (c = {self.confidence:g})")
        text = f"{method} of " + ", ".join(f"{n} ×{self.weights[n]:g}" for n in self.branches())
        if self.specificity:
            text += (f" with a specificity prior (a card naming the filtered database or table "
                     f"scores up to ×{1 + self.specificity:g})")
        return text


def rrf_fuse(rankings: list[list[uuid.UUID]], weights: list[float] | None = None,
             k: float = RRF_K) -> list[tuple[uuid.UUID, float]]:
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


def dbsf_fuse(rankings: list[list[tuple[uuid.UUID, float]]], weights: list[float] | None = None,
              *, clip: bool = False, confidence: float = 0.0) -> list[tuple[uuid.UUID, float]]:
    """Distribution-based score fusion of best-first ``(id, raw score)`` rankings (Mazzeschi
    2023, Qdrant's ``Fusion.DBSF``): per branch, ``(s - (μ - 3σ)) / 6σ`` with μ and σ (population)
    over that branch's returned scores, optionally clipped to [0, 1], times the branch weight
    (times ``1 + confidence × (s₁ - s₂) / σ`` when ``confidence`` > 0: the module docstring's
    per-query confidence weighting), summed per id. Returns (id, score) best first, ties by
    id."""
    weights = weights or [1.0] * len(rankings)
    scores: dict[uuid.UUID, float] = {}
    for ranking, w in zip(rankings, weights):
        if w == 0 or not ranking:
            continue
        values = [s for _, s in ranking]
        mean = sum(values) / len(values)
        sd = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
        if confidence and sd > 0 and len(values) > 1:
            first, second = sorted(values, reverse=True)[:2]
            w = w * (1.0 + confidence * (first - second) / sd)
        for doc, s in ranking:
            norm = (s - (mean - 3 * sd)) / (6 * sd) if sd > 0 else 0.5
            if clip:
                norm = min(1.0, max(0.0, norm))
            scores[doc] = scores.get(doc, 0.0) + w * norm
    return sorted(scores.items(), key=lambda item: (-item[1], str(item[0])))


def fuse(rankings: Mapping[str, Sequence[tuple[uuid.UUID, float]]],
         profile: FusionProfile) -> list[tuple[uuid.UUID, float]]:
    """Fuse named branch rankings (best-first ``(id, raw score)`` per named vector) with a
    profile. Branches the profile does not weigh are ignored. Returns (id, score) best first."""
    names = [n for n in profile.branches() if n in rankings]
    weights = [profile.weights[n] for n in names]
    if profile.method == "dbsf":
        return dbsf_fuse([list(rankings[n]) for n in names], weights, clip=profile.clip,
                         confidence=profile.confidence)
    return rrf_fuse([[doc for doc, _ in rankings[n]] for n in names], weights, k=profile.k)
