"""A bounded ranking prior from recall feedback (issue 35, part 4): measured, **not wired into
recall**. ``bench/feedback_prior.py`` measured it on the BIRD workspace's evaluation cases held
out from the feedback, and ``bench/README.md`` ("Feedback prior") has the figures and the
decision: with parameters tuned on the feedback half, no variant gained significantly on any
mode of the held-out half, and the one setting that moved ranks lost as much as it gained, so no
fusion profile uses it and feedback stays a curation signal. Nothing in production imports this
module.

Feedback is a verdict per card of a past recall (migration 027: ``helpful``, ``not_helpful``,
``wrong``), read here as a value ``v``: :data:`VERDICT_VALUE` (+1 helpful, -1 otherwise).

Two priors, each a number ``p(c)`` in (-1, 1) per card ``c``:

- **per card** (:func:`card_prior`): every verdict on the card, whatever the question,
  ``p(c) = (h - u) / (h + u + m)`` with ``h`` helpful and ``u`` not helpful or wrong verdicts and
  the smoothing ``m > 0``: the m-estimate of the card's mean verdict with a prior mean of 0 and
  weight ``m`` (B. Cestnik, "Estimating probabilities: a crucial task in machine learning",
  ECAI 1990). A card with few verdicts stays near 0.
- **query-similar** (:func:`similar_prior`): only the past recalls of the same mode whose query
  is within cosine ``t`` of this one, each weighted by its similarity ``s``:
  ``p(c) = Σ_r s_r · v_rc / (Σ_r s_r + m)`` over those recalls ``r`` that gave ``c`` a verdict.
  A card marked wrong for a similar question ranks lower, one marked helpful higher; feedback on
  unrelated questions counts for nothing. The similarity of two queries is the cosine of their
  dense vectors (:func:`cosine`; in production the recall record would keep the vector, or
  the caller would look it up), so the caller passes ``(s_r, verdicts_r)`` pairs.

Either prior can be **penalty-only** (:data:`PENALTY_ONLY`: a helpful verdict is worth 0, so
``p ≤ 0``): a card can only be pushed down by its unhelpful verdicts, and feedback never lifts
the cards other questions found useful above the ones nobody has judged yet.

Re-ranking (:func:`rerank`): a recall's scored cards ``(card, score)``, scores positive (in
:mod:`shared.recall.verified`, ``1/(60 + r)`` for the seed at rank ``r`` plus link
contributions), become ``score × (1 + β · p(c))`` with ``0 ≤ β ≤`` :data:`MAX_STRENGTH`, re-sorted
(ties by the card id's text, as recall breaks them). **Bound**: every score moves by a factor in
``[1 - β, 1 + β]``, so a card can only pass cards whose score is within a factor
``(1 + β) / (1 - β)`` of its own; with seed scores ``1/(60 + r)`` that is at most about
``(60 + r) · 2β / (1 - β)`` places (β = 0.05: about 6 places at the top of the list); cards
without feedback keep their scores; ``β = 0`` is recall unchanged. The formula is not borrowed
from a particular system; only the smoothing is (Cestnik, above).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import TypeVar

#: the value of a verdict in the priors
VERDICT_VALUE: dict[str, float] = {"helpful": 1.0, "not_helpful": -1.0, "wrong": -1.0}
#: the values of a penalty-only prior: a helpful verdict counts as a verdict (it dilutes the
#: unhelpful ones) but never lifts a card; ``p`` is then in (-1, 0]
PENALTY_ONLY: dict[str, float] = {"helpful": 0.0, "not_helpful": -1.0, "wrong": -1.0}
#: the largest strength β :func:`rerank` accepts (scores move by at most ±50 %)
MAX_STRENGTH = 0.5

C = TypeVar("C", bound=Hashable)


def card_prior(verdicts: Iterable[Mapping[C, str]], smoothing: float,
               values: Mapping[str, float] = VERDICT_VALUE) -> dict[C, float]:
    """The per-card prior ``(h - u) / (h + u + m)`` (module docstring) of every card named in
    ``verdicts`` (one ``{card: verdict}`` mapping per past recall), ``m = smoothing > 0``;
    ``values``: each verdict's value (:data:`PENALTY_ONLY`: ``-u / (h + u + m)``)."""
    if smoothing <= 0:
        raise ValueError("smoothing must be positive")
    total: dict[C, float] = {}
    count: dict[C, int] = {}
    for recall in verdicts:
        for card, verdict in recall.items():
            total[card] = total.get(card, 0.0) + values[verdict]
            count[card] = count.get(card, 0) + 1
    return {card: total[card] / (count[card] + smoothing) for card in total}


def similar_prior(similar: Iterable[tuple[float, Mapping[C, str]]], threshold: float,
                  smoothing: float, values: Mapping[str, float] = VERDICT_VALUE
                  ) -> dict[C, float]:
    """The query-similar prior ``Σ s·v / (Σ s + m)`` (module docstring) from past recalls of
    the same mode, given as ``(cosine to this query, {card: verdict})``; recalls below
    ``threshold`` count for nothing, ``m = smoothing > 0``; ``values`` as in
    :func:`card_prior`."""
    if smoothing <= 0:
        raise ValueError("smoothing must be positive")
    total: dict[C, float] = {}
    weight: dict[C, float] = {}
    for s, recall in similar:
        if s < threshold or s <= 0:
            continue
        for card, verdict in recall.items():
            total[card] = total.get(card, 0.0) + s * values[verdict]
            weight[card] = weight.get(card, 0.0) + s
    return {card: total[card] / (weight[card] + smoothing) for card in total}


def rerank(scored: Sequence[tuple[C, float]], prior: Mapping[C, float],
           strength: float) -> list[tuple[C, float]]:
    """``scored`` (``(card, score)``, scores ≥ 0) with each score times ``1 + β · p(c)``
    (``p`` clipped to [-1, 1], 0 for a card without one; ``β = strength``), best first, ties by
    the card's text. :raises ValueError: ``strength`` outside ``[0,`` :data:`MAX_STRENGTH` ``]``
    or a negative score (the bound holds for positive scores only)."""
    if not 0.0 <= strength <= MAX_STRENGTH:
        raise ValueError(f"strength must be within [0, {MAX_STRENGTH}]")
    out = []
    for card, score in scored:
        if score < 0:
            raise ValueError("scores must not be negative")
        p = max(-1.0, min(1.0, prior.get(card, 0.0)))
        out.append((card, score * (1.0 + strength * p)))
    return sorted(out, key=lambda item: (-item[1], str(item[0])))


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """The cosine of two vectors (0 when either is zero)."""
    dot = sum(x * y for x, y in zip(a, b))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0
