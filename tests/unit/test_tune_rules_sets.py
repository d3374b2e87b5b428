"""The selection arithmetic of issue 27's offline profile search (``bench/tune_rules_sets.py``):
the paired margin, the resampled pass rate and candidate labels read back as the product's
profiles. Small in-line arrays; no cache file, database or model."""

from __future__ import annotations

import numpy as np
import pytest

from bench.tune_rules_sets import PassRate, paired_margin, parse_candidate
from shared.recall.fusion import FusionProfile


def test_paired_margin_is_zero_for_a_tie_and_signed_in_units_of_disagreement():
    peer = np.array([[True, True], [False, True], [True, True], [False, False]])
    assert paired_margin(peer.copy(), [peer]) == 0.0
    better = peer.copy()
    better[1, 0] = better[3, 1] = True           # one more pair found at r@1, one at r@3
    assert paired_margin(better, [peer]) == pytest.approx(1.0)
    worse = peer.copy()
    worse[0, 0] = False
    assert paired_margin(worse, [peer]) == pytest.approx(-1.0)
    # against two peers the worse of the two margins counts
    assert paired_margin(better, [peer, better]) == 0.0


def test_pass_rate_is_one_for_the_peer_itself_and_the_chance_a_miss_is_not_drawn_otherwise():
    n = 40
    where = {"c": (np.arange(n), np.zeros(n, dtype=int))}       # the wanted card is position 0
    peer_top = np.tile([0, 1, 2], (n, 1))                         # the peer ranks it first
    peers = {"c": [np.ones((n, 2), dtype=bool)]}
    rate = PassRate(where, peers, resamples=400)
    assert rate(peer_top) == 1.0
    worse = peer_top.copy()
    worse[0] = [1, 2, 3]                                          # misses one pair at r@1 and r@3
    # at or above the peer only in the resamples that do not draw the missed pair:
    # (1 - 1/40) ** 40 = 0.363 of them
    assert rate(worse) == pytest.approx((1 - 1 / n) ** n, abs=0.07)


def test_candidate_labels_read_back_as_product_profiles():
    assert parse_candidate("dbsf c=1.5 0/1/3/1.5") == FusionProfile(
        method="dbsf", weights={"key": 0.0, "key_bm25": 1.0, "own": 3.0, "own_bm25": 1.5},
        confidence=1.5)
    assert parse_candidate("dbsf clip c=0 1/0/1/1").clip is True
    assert parse_candidate("rrf k=30 1/1/1/1").k == 30
    for bad in ("minmax c=1 1/1/1/1", "dbsf z c=1 1/1/1/1", "dbsf c=1 1/1/1"):
        with pytest.raises(ValueError):
            parse_candidate(bad)
