"""Dense batches are bounded by estimated tokens as well as by count (issue 25, case 3)."""

from __future__ import annotations

from shared.index.embedding import CHARS_PER_TOKEN, DENSE_BATCH, DENSE_BATCH_TOKENS, dense_batches


def test_long_texts_make_small_batches_and_short_ones_full_batches():
    texts = ["short rule"] * 40 + ["x" * 120_000] * 9 + ["y" * 1_500] * 7
    batches = dense_batches(texts, max_tokens=512)
    assert sorted(i for b in batches for i in b) == list(range(len(texts)))
    for batch in batches:
        longest = max(min(512, len(texts[i]) // CHARS_PER_TOKEN + 2) for i in batch)
        assert len(batch) <= DENSE_BATCH
        assert len(batch) == 1 or len(batch) * longest <= DENSE_BATCH_TOKENS
    assert max(len(b) for b in batches if any(len(texts[i]) > 2_000 for i in b)) == 4
    assert [len(b) for b in batches if texts[b[0]] == "short rule"] == [16, 16, 8]


def test_a_text_longer_than_the_budget_is_a_batch_of_its_own():
    assert dense_batches(["z" * 50_000], max_tokens=100_000) == [[0]]
