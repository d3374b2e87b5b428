"""Fusion of the branch rankings of a hybrid query (``shared.recall.fusion``, DESIGN §5 step 1):
reciprocal rank fusion with k = 60, distribution-based score fusion with and without per-query
confidence weighting, and a profile's weights, each with exact expected scores (raw branch
scores given by hand: no embedder)."""

from __future__ import annotations

import uuid

import pytest

from shared.recall.fusion import RRF_K, FusionProfile, dbsf_fuse, fuse, rrf_fuse

X, Y, Z = (uuid.UUID(int=i + 1) for i in range(3))


def test_rrf_fusion_uses_k_60_and_ties_by_id():
    assert RRF_K == 60
    fused = dict(rrf_fuse([[X, Y], [Y, Z]]))
    assert fused[Y] == 1 / 62 + 1 / 61
    assert fused[X] == 1 / 61 and fused[Z] == 1 / 62
    assert [d for d, _ in rrf_fuse([[Y], [X]])] == sorted([X, Y], key=str)


def test_rrf_weights_scale_a_branch_and_weight_0_adds_no_candidates():
    assert rrf_fuse([[X], [Y]], [2.0, 1.0]) == [(X, 2 / 61), (Y, 1 / 61)]
    assert rrf_fuse([[X], [Y, Z]], [1.0, 0.0]) == [(X, 1 / 61)]
    assert rrf_fuse([[X]], k=10) == [(X, 1 / 11)]


def test_dbsf_normalises_each_branch_by_its_own_distribution():
    # branch 1: mean 2, population sd 1 -> (s - (2 - 3)) / 6; branch 2: one score -> 0.5
    fused = dict(dbsf_fuse([[(X, 3.0), (Y, 1.0)], [(Y, 0.2)]]))
    assert fused[X] == pytest.approx(4 / 6)
    assert fused[Y] == pytest.approx(2 / 6 + 0.5)
    # the scale of a branch's raw scores does not matter, only their distribution
    scaled = dict(dbsf_fuse([[(X, 300.0), (Y, 100.0)]]))
    assert (scaled[X], scaled[Y]) == pytest.approx((4 / 6, 2 / 6))


def test_dbsf_clips_weighs_and_ties_by_id():
    ranking = [(X, 10.0)] + [(uuid.UUID(int=100 + i), 0.0) for i in range(20)]
    assert dict(dbsf_fuse([ranking]))[X] > 1.0
    assert dict(dbsf_fuse([ranking], clip=True))[X] == 1.0
    assert dbsf_fuse([[(X, 1.0), (Y, 1.0)]], [0.5]) == [(X, 0.25), (Y, 0.25)]
    assert dbsf_fuse([[(Y, 1.0)], [(X, 1.0)]]) == [(X, 0.5), (Y, 0.5)]
    assert dbsf_fuse([[(X, 1.0)], []], [0.0, 1.0]) == []


def test_a_profile_fuses_the_branches_it_weighs():
    rankings = {"dense": [(X, 0.9), (Y, 0.1)], "bm25": [(Y, 7.0)], "key": [(Z, 1.0)]}
    profile = FusionProfile(method="rrf", weights={"dense": 1.0, "bm25": 0.5, "other": 1.0,
                                                   "key": 0.0})
    assert profile.branches() == ("bm25", "dense", "other")
    assert fuse(rankings, profile) == rrf_fuse([[Y], [X, Y]], [0.5, 1.0])
    dbsf = FusionProfile(method="dbsf", weights={"dense": 1.0, "bm25": 0.5}, clip=True)
    assert fuse(rankings, dbsf) == dbsf_fuse([rankings["bm25"], rankings["dense"]], [0.5, 1.0],
                                             clip=True)


def test_confidence_weighting_lets_the_branch_that_singles_out_a_card_decide():
    # branch 1: mean 2, sd 1, best above second by 2 sd -> weight 1 × (1 + 0.5 × 2) = 2;
    # branch 2: one hit (sd 0) -> no gap, weight 1, its hit 0.5
    rankings = [[(X, 3.0), (Y, 1.0)], [(Y, 0.2)]]
    plain = dict(dbsf_fuse(rankings))
    assert plain[Y] > plain[X]  # DBSF: Y is in both branches
    weighted = dbsf_fuse(rankings, confidence=0.5)
    assert [d for d, _ in weighted] == [X, Y]
    assert dict(weighted)[X] == pytest.approx(2 * 4 / 6)
    assert dict(weighted)[Y] == pytest.approx(2 * 2 / 6 + 0.5)
    assert dbsf_fuse(rankings, confidence=0.0) == dbsf_fuse(rankings)


def test_confidence_uses_the_gap_between_the_two_best_scores_not_their_order():
    level = [(X, 1.0), (Y, 1.0), (Z, 0.0)]  # the best two are level: no gap, weight unchanged
    assert dbsf_fuse([level], confidence=1.0) == dbsf_fuse([level])
    unsorted = [(Y, 1.0), (X, 3.0)]  # gap from the scores, whatever the list's order
    assert dbsf_fuse([unsorted], confidence=0.5) == dbsf_fuse([[(X, 3.0), (Y, 1.0)]],
                                                              confidence=0.5)


def test_a_profile_passes_its_confidence_and_says_so():
    rankings = {"own": [(X, 3.0), (Y, 1.0)], "key": [(Y, 0.2)]}
    profile = FusionProfile(method="dbsf", weights={"own": 1.0, "key": 1.0}, confidence=0.5)
    assert fuse(rankings, profile) == dbsf_fuse([rankings["key"], rankings["own"]],
                                                [1.0, 1.0], confidence=0.5)
    assert profile.describe() == ("distribution-based score fusion (DBSF) with per-query "
                                  "confidence weighting (c = 0.5) of key ×1, own ×1")
    assert "confidence" not in FusionProfile(method="dbsf", weights={"own": 1.0}).describe()


def test_every_mode_keeps_the_profile_its_figures_were_measured_with():
    """Every mode keeps the profile its published figures were measured with, confidence
    weighting off: issue 27's worst-case candidate for ``rules`` was not adopted (it lowered the
    clause pairs' figures; ``bench/README.md``); ``search`` and ``rules`` with the specificity
    prior of issue 42 (1.0, ``bench/specificity.py``)."""
    from shared.recall.profiles import MODE_PROFILES

    assert MODE_PROFILES["solved"] == FusionProfile(
        method="dbsf", weights={"key": 1.0, "dense": 1.0, "bm25": 0.75})
    assert MODE_PROFILES["search"] == FusionProfile(
        method="dbsf", weights={"key": 1.0, "dense": 4.0, "bm25": 4.0, "key_bm25": 4.0},
        specificity=1.0)
    assert MODE_PROFILES["rules"] == FusionProfile(
        method="dbsf", weights={"key": 0.5, "key_bm25": 0.5, "own": 2.0, "own_bm25": 1.0},
        specificity=1.0)
