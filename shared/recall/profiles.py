"""The retrieval profile of each recall mode: which named vectors it searches and how their
rankings are fused (DESIGN §5 step 1), chosen on data the reported figures do not include.

The weights were chosen on the tuning halves of Spider-Syn train (70 of its 140 databases, by
sorted ``db_id``) and of the BIRD databases, and are reported on the other halves
(``bench/README.md``, "Recall quality"; ``bench/recall_quality.py`` prints every mode next to
the peer configurations: dense only, BM25 only and equal-weight reciprocal rank fusion).
Distribution-based score fusion (:mod:`shared.recall.fusion`) won over reciprocal rank fusion on
the tuning data for every mode.

- ``solved``: the key vector (the stored question) with the content's dense vector and BM25: a
  reworded question is compared with stored questions first.
- ``search``: all four vectors, BM25 on the card's text (with the questions of the solved cards
  that link to it) weighted highest. Chosen on format 3; re-checked on format 4 with
  ``bench/tune_rules_profile.py --mode search`` (16 candidates over the six vectors, the peers
  among them): no candidate met the rule set beforehand (TUNE all pairs r@1 and r@5 at least the
  best peer's, then the highest TUNE shared-clause r@5, kept only if it improves one of shared
  r@5 / all r@5 without lowering the other), so the profile stays (``bench/README.md``). A
  projection with one vector per linking question (an ``exemplars`` multi-vector, MaxSim), fused
  or given a reserved rank, was measured the same way and dropped: no variant raised TUNE
  shared-clause r@5 without lowering all pairs (``bench/README.md``, "Tried and dropped"; the
  code: ``git show 2ba7f62:bench/patches/format5_exemplars.patch``).
- ``rules`` (projection format 4): the key vectors and the card's own text (``own``,
  ``own_bm25``: without the questions of the linking solved cards, which dilute a rule's words
  for a request that did not come through them), own dense weighted highest; chosen on BIRD
  clause recall's TUNE databases with ``bench/tune_rules_profile.py`` (31 candidates in two
  rounds; the peers' DBSF and RRF of format 2's text were candidates too). Issue 27 searched
  62,401 candidates (``git show feb0c8a:bench/tune_rules_sets.py``) for the worst case over
  rule sets of other kinds (``feb0c8a:bench/rule_sets_data.py``); the best, DBSF with per-query
  confidence weighting ``c = 2`` of key_bm25 .25 / own 1.5 / own_bm25 1, was not adopted: one
  query short of a single branch at r@1 on three REPORT checks, and 0.03-0.05 lower r@1 on the
  clause pairs (``bench/README.md``, "Tried and dropped").
"""

from __future__ import annotations

from shared.index.engine import BM25, DENSE, KEY, KEY_BM25, OWN, OWN_BM25
from shared.recall.fusion import FusionProfile

#: the specificity prior of ``search`` and ``rules`` (issue 42): under a database/table filter a
#: card whose own dependency names it scores up to twice a workspace-wide one. Chosen on BIRD's
#: TUNE databases among 0, 0.1, 0.25, 0.5 and 1 with ``bench/specificity.py``; on REPORT it lost
#: no case and took the workspace-wide share of the first five under a table filter from 0.7 % to
#: 0 (``bench/README.md``, "Specificity prior"). ``solved`` returns solved questions only, which
#: always name their database: no prior.
SPECIFICITY = 1.0

MODE_PROFILES: dict[str, FusionProfile] = {
    "solved": FusionProfile(method="dbsf", weights={KEY: 1.0, DENSE: 1.0, BM25: 0.75}),
    "search": FusionProfile(method="dbsf",
                            weights={KEY: 1.0, DENSE: 4.0, BM25: 4.0, KEY_BM25: 4.0},
                            specificity=SPECIFICITY),
    "rules": FusionProfile(method="dbsf",
                           weights={KEY: 0.5, KEY_BM25: 0.5, OWN: 2.0, OWN_BM25: 1.0},
                           specificity=SPECIFICITY),
}


def profile_for(mode: str) -> FusionProfile:
    """The fusion profile of a recall mode."""
    return MODE_PROFILES[mode]


def describe_profiles() -> str:
    """Each mode's fusion in words (:meth:`FusionProfile.describe`), ``mode: …`` joined by
    ``; `` in the order of :data:`MODE_PROFILES`."""
    return "; ".join(f"{mode}: {p.describe()}" for mode, p in MODE_PROFILES.items())
