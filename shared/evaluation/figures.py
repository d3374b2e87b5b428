"""Figures of an evaluation run and the comparison with the previous run (issue 34).

Figures, per recall mode and case source (``derived``, ``curated``): the number of cases, the
share whose expected card is ranked 1st (r@1), in the top 3 (r@3) and in the top 5 (r@5), and the
mean reciprocal rank (MRR; a card not in the top 100 counts 0).

Regression rule: two runs are compared on the cases they share (by case key), figure by figure
(r@1, r@3, r@5 of each mode and source), with McNemar's exact test on the paired outcomes
(McNemar 1947; the exact binomial form, e.g. Fagerland, Lydersen & Laake, "The McNemar test for
binary matched-pairs data", BMC Medical Research Methodology 13:91, 2013): of the cases whose
outcome differs, ``lost`` were hits before and are misses now, ``gained`` the reverse. Under "no
change" each differing case is a fair coin, so the two-sided p-value is
``min(1, 2 · P(X ≥ lost))`` for X ~ Binomial(lost + gained, ½). A figure **regressed** when it
lost more than it gained and p < :data:`ALPHA`; an unchanged ranking has no differing case and can
never be flagged, and a handful of changed cases cannot either (with 5 differing cases, all lost,
p = 0.0625). Each figure is tested at α = 0.05; the run records every test (``tests``) so a
reader sees the near misses too.
"""

from __future__ import annotations

from math import comb
from typing import Any

import msgspec

from shared.evaluation.cases import SOURCES, Case

CUTOFFS = (1, 3, 5)
ALPHA = 0.05


class Figure(msgspec.Struct, kw_only=True):
    """The figures of one mode and source: ``cases`` counted, r@1 / r@3 / r@5 (0..1) and MRR."""

    mode: str
    source: str
    cases: int
    r1: float
    r3: float
    r5: float
    mrr: float


class Comparison(msgspec.Struct, kw_only=True):
    """One paired test: mode, source, cutoff k, the shared cases, how many were lost (hit
    before, miss now) and gained, the p-value, and whether it is a regression."""

    mode: str
    source: str
    k: int
    shared: int
    lost: int
    gained: int
    p: float
    regression: bool


def case_rank(case: Case, ranked: list[str]) -> int | None:
    """The case's rank in ``ranked`` (card ids best first, 1-based): the best-ranked expected
    card for ``any``, the worst for ``all``; None when the rule is not met in ``ranked``."""
    pos = {cid: i for i, cid in enumerate(ranked, start=1)}
    from shared.models import card_id_str

    found = [pos.get(card_id_str(e)) for e in case.expected]
    if case.match == "all":
        return None if any(r is None for r in found) else max(found)  # type: ignore[type-var]
    hits = [r for r in found if r is not None]
    return min(hits) if hits else None


def figures(cases: list[Case], ranks: dict[str, int | None]) -> list[Figure]:
    """Figures per mode and source, in mode then source order; only groups with cases."""
    groups: dict[tuple[str, str], list[int | None]] = {}
    for case in cases:
        groups.setdefault((case.mode, case.source), []).append(ranks.get(case.key))
    out = []
    for mode in ("solved", "search", "rules"):
        for source in SOURCES:
            rs = groups.get((mode, source))
            if not rs:
                continue
            n = len(rs)
            at = {k: sum(1 for r in rs if r is not None and r <= k) / n for k in CUTOFFS}
            mrr = sum(1.0 / r for r in rs if r is not None) / n
            out.append(Figure(mode=mode, source=source, cases=n, r1=round(at[1], 4),
                              r3=round(at[3], 4), r5=round(at[5], 4), mrr=round(mrr, 4)))
    return out


def worse(before: int | None, now: int | None) -> bool:
    """A rank ``now`` worse than ``before`` (None: not in the top 100)."""
    return before is not None and (now is None or now > before)


def mcnemar_p(lost: int, gained: int) -> float:
    """Two-sided exact McNemar p-value for ``lost`` vs ``gained`` discordant pairs."""
    n = lost + gained
    if n == 0:
        return 1.0
    tail = max(lost, gained)
    p = sum(comb(n, i) for i in range(tail, n + 1)) / 2 ** n
    return min(1.0, 2 * p)


def compare(cases: list[Case], now: dict[str, int | None],
            before: dict[str, Any]) -> list[Comparison]:
    """The paired tests of this run's ``now`` ranks against a previous run's ``before``
    (``{case key: rank or None}``), on the cases both have, per mode, source and cutoff."""
    out = []
    groups: dict[tuple[str, str], list[str]] = {}
    for case in cases:
        if case.key in before:
            groups.setdefault((case.mode, case.source), []).append(case.key)
    for (mode, source), keys in sorted(groups.items()):
        for k in CUTOFFS:
            def hit(r: Any) -> bool:
                return r is not None and r <= k
            lost = sum(1 for key in keys if hit(before[key]) and not hit(now.get(key)))
            gained = sum(1 for key in keys if hit(now.get(key)) and not hit(before[key]))
            p = mcnemar_p(lost, gained)
            out.append(Comparison(mode=mode, source=source, k=k, shared=len(keys), lost=lost,
                                  gained=gained, p=round(p, 6),
                                  regression=lost > gained and p < ALPHA))
    return out
