"""Fusion of the branch rankings of a hybrid query (``shared.recall.fusion``, DESIGN §5 step 1):
reciprocal rank fusion with k = 60, distribution-based score fusion, and a profile's weights,
each with exact expected scores."""

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
