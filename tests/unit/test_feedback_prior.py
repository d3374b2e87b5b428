"""The bounded ranking prior from recall feedback (``shared.recall.feedback_prior``, issue 35
part 4; measured by ``bench/feedback_prior.py``, not wired into recall): the per-card and the
query-similar priors with exact expected values, and the re-ranking's bound. Plain numbers only:
card names are strings, query similarities are given by hand (no embedder), which is enough
for ranking arithmetic and says nothing about recall quality."""

from __future__ import annotations

import pytest

from shared.recall.feedback_prior import (MAX_STRENGTH, PENALTY_ONLY, card_prior, cosine,
                                          rerank, similar_prior)


def test_card_prior_is_the_smoothed_mean_verdict():
    got = card_prior([{"a": "helpful", "b": "not_helpful"}, {"a": "helpful", "b": "wrong"},
                      {"a": "not_helpful"}], smoothing=1.0)
    assert got == {"a": pytest.approx((2 - 1) / (3 + 1)), "b": pytest.approx(-2 / 3)}
    # one verdict moves a card little; many move it toward ±1, never to it
    assert card_prior([{"c": "wrong"}], smoothing=3.0) == {"c": -0.25}
    many = card_prior([{"c": "helpful"}] * 97, smoothing=3.0)["c"]
    assert many == pytest.approx(0.97) and many < 1
    with pytest.raises(ValueError):
        card_prior([], smoothing=0)


def test_similar_prior_counts_only_recalls_within_the_threshold_weighted_by_similarity():
    past = [(0.9, {"a": "wrong", "b": "helpful"}), (0.6, {"a": "helpful"}),
            (0.4, {"a": "helpful", "c": "helpful"})]
    got = similar_prior(past, threshold=0.5, smoothing=0.5)
    assert got["a"] == pytest.approx((-0.9 + 0.6) / (0.9 + 0.6 + 0.5))
    assert got["b"] == pytest.approx(0.9 / (0.9 + 0.5))
    assert "c" not in got  # only an unrelated question (0.4 < 0.5) spoke of it
    assert similar_prior(past, threshold=0.95, smoothing=0.5) == {}


def test_rerank_moves_scores_by_at_most_the_strength_and_ties_by_card_text():
    scored = [("x", 1 / 61), ("y", 1 / 62), ("z", 1 / 63)]
    out = dict(rerank(scored, {"x": -5.0, "z": 1.0}, strength=0.05))  # -5 is clipped to -1
    assert out["x"] == pytest.approx(1 / 61 * 0.95)
    assert out["y"] == 1 / 62
    assert out["z"] == pytest.approx(1 / 63 * 1.05)
    assert [c for c, _ in rerank(scored, {"x": -1.0, "z": 1.0}, 0.05)] == ["z", "y", "x"]
    # strength 0 is recall unchanged; a card passes only cards within (1+β)/(1-β) of its score
    assert rerank(scored, {"z": 1.0}, 0.0) == scored
    far = [("top", 1 / 61), ("low", 1 / 80)]
    assert [c for c, _ in rerank(far, {"top": -1.0, "low": 1.0}, 0.1)] == ["top", "low"]
    assert [c for c, _ in rerank([("b", 1.0), ("a", 1.0)], {}, 0.1)] == ["a", "b"]


def test_rerank_refuses_an_unbounded_strength_or_a_negative_score():
    with pytest.raises(ValueError):
        rerank([("x", 1.0)], {}, MAX_STRENGTH + 0.01)
    with pytest.raises(ValueError):
        rerank([("x", 1.0)], {}, -0.1)
    with pytest.raises(ValueError):
        rerank([("x", -1.0)], {"x": 1.0}, 0.1)


def test_cosine():
    assert cosine([1.0, 0.0], [2.0, 0.0]) == 1.0
    assert cosine([1.0, 0.0], [0.0, 3.0]) == 0.0
    assert cosine([0.0, 0.0], [1.0, 1.0]) == 0.0


def test_penalty_only_priors_never_lift_a_card():
    verdicts = [{"a": "helpful", "b": "not_helpful"}, {"a": "helpful", "b": "helpful"}]
    got = card_prior(verdicts, smoothing=1.0, values=PENALTY_ONLY)
    assert got == {"a": 0.0, "b": pytest.approx(-1 / 3)}  # helpful dilutes, never lifts
    near = similar_prior([(0.8, {"a": "helpful", "b": "wrong"})], 0.5, 0.2, PENALTY_ONLY)
    assert near == {"a": 0.0, "b": pytest.approx(-0.8)}
