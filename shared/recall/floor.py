"""The similarity floor of a recall mode (issue 34, item 6): the cosine similarity below which an
evaluation run almost never found an expected card, so that a caller can tell "no card
applies" from a weak hit.

Why a similarity and not the result's ``score``: the score is relative to one query (the fusion
of its branches and link decay, :mod:`shared.recall.verified`), so the first result of any query
scores the same whether it fits or not. A result's ``similarity`` is absolute: the strongest cosine similarity
between the query's dense vector and the card's dense vectors that the mode searches (those
of the fused branches; a card that no dense branch ranked is looked up by id), and, for a card
reached through a link, that of the card it was reached from when it is higher (a rule that a
matching solved question used applies as much as the question does).

How the floor is chosen, per mode, from one finished run on the workspace's own cases
(:mod:`shared.evaluation.cases`, with their leave-one-out): each case's first recall (top 10)
gives, among its first :data:`TOP_RESULTS` results, the similarities of its expected cards
("expected") and of the other cards ("others"). The floor is the :data:`QUANTILE` quantile of
the expected similarities (the ``⌊QUANTILE · n⌋``-th smallest, 0-based), so that about 1 in
100 expected cards the run ranked that high lies below it; a mode with fewer than
:data:`MIN_EXPECTED` expected similarities gets no floor. The run records, per mode, the
floor, both counts and how many of each lie below it (``expected_below``: the cost, in cards
recall would have marked wrongly; ``others_below``: what the floor marks).

Recall uses the floors of the workspace's newest finished run in the current projection format
only when that run's model fingerprint is the serving index's (after a model switch, the new
model's first run makes new floors; until then there are none). ``below_floor`` marks the
results under it; ``min_score`` (a number, or ``"floor"``) leaves them out.
"""

from __future__ import annotations

import math
from typing import Any

#: results of each case's first recall whose similarities a run samples
TOP_RESULTS = 5
#: the share of expected cards a floor may mark (the quantile it is chosen at)
QUANTILE = 0.01
#: expected similarities a mode needs before it gets a floor
MIN_EXPECTED = 50


def choose(expected: list[float], others: list[float], *, quantile: float = QUANTILE,
           minimum: int | None = None) -> dict[str, Any]:
    """The floor of one mode from a run's samples (see the module docstring):
    ``{floor, expected, others, expected_below, others_below, quantile}`` (similarities
    rounded to 4 places; ``floor`` None when there are fewer than ``minimum`` expected,
    default :data:`MIN_EXPECTED`)."""
    minimum = MIN_EXPECTED if minimum is None else minimum
    ranked = sorted(expected)
    floor = None
    if len(ranked) >= max(1, minimum):
        floor = round(ranked[min(len(ranked) - 1, math.floor(quantile * len(ranked)))], 4)
    return {"floor": floor, "expected": len(ranked), "others": len(others),
            "expected_below": sum(1 for s in ranked if floor is not None and s < floor),
            "others_below": sum(1 for s in others if floor is not None and s < floor),
            "quantile": quantile}


def for_mode(row: dict[str, Any] | None, fingerprint: str, mode: str) -> float | None:
    """The floor of ``mode`` from :func:`shared.store.evaluations.floors`'s row, when that run
    ran with ``fingerprint`` (the serving index's model); None otherwise."""
    if not row or row.get("fingerprint") != fingerprint or not row.get("floors"):
        return None
    value = (row["floors"].get(mode) or {}).get("floor")
    return float(value) if value is not None else None
