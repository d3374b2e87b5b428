"""The query adapter (issue 42, section 3; :mod:`shared.recall.adapter`) on synthetic data: a
question is its card's vector passed through a fixed linear distortion plus noise, so a low-rank
map of the query side can undo part of it, and one learned on some cards must help on others."""

from __future__ import annotations

import numpy as np
import pytest

from shared.recall.adapter import QueryAdapter, reciprocal_ranks, train

D = 24


def _task(seed: int = 1, cards: int = 300, questions: int = 600):
    rng = np.random.default_rng(seed)
    c = rng.normal(size=(cards, D))
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    # the questions' words differ from the cards' in a fixed direction of rank 4
    a, b = rng.normal(size=(D, 4)), rng.normal(size=(D, 4))
    distortion = np.eye(D) + 0.6 * a @ b.T / D ** 0.5
    target = rng.integers(0, cards, size=questions)
    q = c[target] @ distortion.T + 0.25 * rng.normal(size=(questions, D)) / D ** 0.5
    return q, [{int(t)} for t in target], c


def test_an_untrained_adapter_is_the_identity_and_its_bytes_round_trip():
    rng = np.random.default_rng(0)
    q = rng.normal(size=(5, D))
    ident = QueryAdapter(u=np.zeros((D, 8), np.float32), v=rng.normal(size=(D, 8)).astype(np.float32))
    assert np.allclose(ident.apply(q), q / np.linalg.norm(q, axis=1, keepdims=True), atol=1e-6)
    trained = train(*_task(), rank=8, max_steps=30)
    again = QueryAdapter.from_bytes(trained.to_bytes(), D, 8)
    assert np.array_equal(again.u, trained.u) and np.array_equal(again.v, trained.v)
    assert again.digest() == trained.digest()
    with pytest.raises(ValueError, match="has"):
        QueryAdapter.from_bytes(trained.to_bytes()[:-4], D, 8)


def test_training_is_deterministic():
    task = _task()
    one, two = train(*task, rank=8, max_steps=60), train(*task, rank=8, max_steps=60)
    assert one.digest() == two.digest() and one.steps == two.steps


def test_an_adapter_learned_on_some_questions_helps_on_others():
    q, pos, c = _task()
    held_out = slice(400, 600)
    adapter = train(q[:400], pos[:400], c, rank=8)
    before = reciprocal_ranks(q[held_out], c, pos[held_out]).mean()
    after = reciprocal_ranks(adapter.apply(q[held_out]), c, pos[held_out]).mean()
    assert adapter.steps > 0 and adapter.validation_mrr[1] > adapter.validation_mrr[0]
    assert after > before + 0.05, (before, after)


def test_shuffled_pairs_teach_nothing_that_holds_on_other_questions():
    """Trained on questions paired with random cards, early stopping on its own validation share
    keeps the adapter near the identity: held-out MRR does not rise."""
    q, pos, c = _task()
    rng = np.random.default_rng(7)
    shuffled = [{int(rng.integers(0, len(c)))} for _ in pos[:400]]
    adapter = train(q[:400], shuffled, c, rank=8)
    before = reciprocal_ranks(q[400:], c, pos[400:]).mean()
    after = reciprocal_ranks(adapter.apply(q[400:]), c, pos[400:]).mean()
    assert after <= before + 0.01, (before, after)


def test_bad_shapes_and_no_positive_are_refused():
    q, pos, c = _task(cards=20, questions=10)
    with pytest.raises(ValueError, match="dimension"):
        train(q[:, :5], pos, c)
    with pytest.raises(ValueError, match="positive sets"):
        train(q, pos[:3], c)
    with pytest.raises(ValueError, match="no training question"):
        train(q, [set() for _ in pos], c)
