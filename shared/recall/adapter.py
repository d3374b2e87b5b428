"""A query adapter a workspace learns from its own approved knowledge (issue 42, section 3): a
linear map of the **query** embedding only, ``W = I + U Vᵀ`` of low rank, trained so that a
question's embedding lands nearer the cards its approved SQL used. Card vectors are untouched,
so switching it on or off needs no re-index; applying it is one ``d × r`` and one ``r × d``
product per query.

Training: a softmax contrastive loss (InfoNCE: A. van den Oord, Y. Li and O. Vinyals,
"Representation Learning with Contrastive Predictive Coding", 2018) over the whole pool of cards,
for each ``(question, card)`` pair: ``-log softmax(q'·C / τ)[card]`` with ``q' = W q``, the
question's other expected cards masked out of the denominator (a question that used three cards
is not taught that two of them are wrong). Full batch, Adam (D. P. Kingma and J. Ba, 2015), ``U``
starting at zero (so ``W = I``: an untrained adapter changes nothing) and ``V`` small and random
with a fixed seed (deterministic); L2 decay pulls ``U Vᵀ`` toward 0. The number of steps is chosen
by early stopping on a validation share of the training questions (mean reciprocal rank), never
on the questions the adapter is measured on. Low-rank linear query adapters for a frozen
embedding: e.g. Chroma's "Embedding Adapters" technical report (2024) and the linear adapters of
``sentence-transformers``; this one is our own, in numpy.

Pure: numpy arrays in, numpy arrays out. Shapes: ``d`` the model's dimension (384 for
all-MiniLM-L6-v2), ``r`` the rank.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

#: the rank of ``U Vᵀ`` (issue 42's experiment: 32)
RANK = 32
#: softmax temperature of the contrastive loss
TEMPERATURE = 0.05
#: the Adam learning rates tried; the one with the best validation MRR is kept
LEARNING_RATES = (0.0003, 0.001, 0.003)
DECAY = 1e-4
MAX_STEPS = 400
#: steps between two validation checks, and checks without improvement before stopping
CHECK_EVERY = 5
PATIENCE = 6
#: share of the training questions held out for early stopping
VALIDATION_SHARE = 0.2


@dataclass
class QueryAdapter:
    """``W = I + U Vᵀ``: ``u`` and ``v`` of shape ``(d, r)``, float32. ``steps``: the training
    steps kept (early stopping); ``pairs``: the training pairs; ``validation_mrr``: the
    validation questions' mean reciprocal rank before (``W = I``) and after training."""

    u: np.ndarray
    v: np.ndarray
    learning_rate: float = 0.0
    steps: int = 0
    pairs: int = 0
    validation_mrr: tuple[float, float] = (0.0, 0.0)

    @property
    def dimension(self) -> int:
        """``d``, the embedding dimension it maps."""
        return int(self.u.shape[0])

    def apply(self, queries: np.ndarray) -> np.ndarray:
        """``W q`` for each row of ``queries`` (``(n, d)`` or ``(d,)``), scaled back to unit
        length (cosine similarities stay cosines: the similarity floor compares them)."""
        q = np.asarray(queries, dtype=np.float32)
        out = q + (q @ self.v) @ self.u.T
        norm = np.linalg.norm(out, axis=-1, keepdims=True)
        return out / np.where(norm == 0, 1.0, norm)

    def to_bytes(self) -> bytes:
        """``u`` then ``v``, float32 little-endian (what PostgreSQL stores)."""
        return (self.u.astype("<f4").tobytes() + self.v.astype("<f4").tobytes())

    @classmethod
    def from_bytes(cls, data: bytes, dimension: int, rank: int) -> "QueryAdapter":
        """The adapter :meth:`to_bytes` wrote. :raises ValueError: a size that is not
        ``2 × dimension × rank`` floats."""
        if len(data) != 8 * dimension * rank:
            raise ValueError(f"an adapter of {dimension} x {rank} has {8 * dimension * rank} "
                             f"bytes, not {len(data)}")
        flat = np.frombuffer(data, dtype="<f4")
        half = dimension * rank
        return cls(u=flat[:half].reshape(dimension, rank).copy(),
                   v=flat[half:].reshape(dimension, rank).copy())

    def digest(self) -> str:
        """``sha256:<hex>`` of :meth:`to_bytes`: names what a recall applied."""
        return "sha256:" + hashlib.sha256(self.to_bytes()).hexdigest()


def _normalise(x: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.where(norm == 0, 1.0, norm)


def reciprocal_ranks(queries: np.ndarray, cards: np.ndarray,
                     positives: list[set[int]]) -> np.ndarray:
    """Per query, ``1 / rank`` of its best-ranked positive card among ``cards`` by cosine
    similarity (``queries``: ``(n, d)``, ``cards``: ``(m, d)``, both any length)."""
    scores = _normalise(queries) @ _normalise(cards).T
    out = np.zeros(len(queries))
    for i, pos in enumerate(positives):
        if not pos:
            continue
        best = max(scores[i, j] for j in pos)
        out[i] = 1.0 / (1 + int(np.sum(scores[i] > best)))
    return out


def _split(n: int, share: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.random.default_rng(seed).permutation(n)
    cut = int(round(n * share)) if n >= 5 else 0
    return order[cut:], order[:cut]


def train(queries: np.ndarray, positives: list[set[int]], cards: np.ndarray, *,
          rank: int = RANK, temperature: float = TEMPERATURE,
          learning_rates: tuple[float, ...] = LEARNING_RATES, decay: float = DECAY,
          max_steps: int = MAX_STEPS, seed: int = 0,
          validation_share: float = VALIDATION_SHARE) -> QueryAdapter:
    """An adapter trained on ``queries`` (``(n, d)``: one embedding per training question) and
    ``positives`` (per question, the indices into ``cards`` (``(m, d)``) of its expected cards):
    one training per learning rate of ``learning_rates`` (:func:`train_one`), the one with the
    best validation MRR kept (the smallest rate on a tie). The validation questions are the same
    share of the training questions for every rate: hyperparameters are chosen inside the
    training data, never on what the adapter is measured on.

    :raises ValueError: no question with a positive, or shapes that do not agree.
    """
    best: QueryAdapter | None = None
    for rate in sorted(learning_rates):
        got = train_one(queries, positives, cards, rank=rank, temperature=temperature,
                        learning_rate=rate, decay=decay, max_steps=max_steps, seed=seed,
                        validation_share=validation_share)
        if best is None or got.validation_mrr[1] > best.validation_mrr[1]:
            best = got
    assert best is not None
    return best


def train_one(queries: np.ndarray, positives: list[set[int]], cards: np.ndarray, *,
              rank: int = RANK, temperature: float = TEMPERATURE, learning_rate: float = 0.001,
              decay: float = DECAY, max_steps: int = MAX_STEPS, seed: int = 0,
              validation_share: float = VALIDATION_SHARE) -> QueryAdapter:
    """An adapter trained with one learning rate (see :func:`train`).

    A share ``validation_share`` of the questions (random, ``seed``) is held out; training stops
    at the step count whose validation MRR was best (checked every :data:`CHECK_EVERY` steps,
    :data:`PATIENCE` checks without a gain end it). With fewer than 5 questions there is no
    validation and it runs ``max_steps``.

    :raises ValueError: no question with a positive, or shapes that do not agree.
    """
    q_all = _normalise(np.asarray(queries, dtype=np.float64))
    c = _normalise(np.asarray(cards, dtype=np.float64))
    if q_all.ndim != 2 or c.ndim != 2 or q_all.shape[1] != c.shape[1]:
        raise ValueError(f"queries {q_all.shape} and cards {c.shape} do not share a dimension")
    if len(positives) != len(q_all):
        raise ValueError(f"{len(positives)} positive sets for {len(q_all)} queries")
    keep = [i for i, p in enumerate(positives) if p]
    if not keep:
        raise ValueError("no training question has an expected card")
    train_idx, val_idx = _split(len(keep), validation_share, seed)
    train_rows = [keep[i] for i in train_idx]
    val_rows = [keep[i] for i in val_idx]
    d = c.shape[1]
    rng = np.random.default_rng(seed)
    u = np.zeros((d, rank))
    v = rng.normal(0.0, 0.01, (d, rank))
    # one row per (question, card) pair; the question's other cards are masked out
    pair_q = np.array([i for i in train_rows for _ in sorted(positives[i])])
    pair_c = np.array([j for i in train_rows for j in sorted(positives[i])])
    mask = np.zeros((len(pair_q), len(c)), dtype=bool)
    for row, (i, j) in enumerate(zip(pair_q, pair_c)):
        for other in positives[i]:
            if other != j:
                mask[row, other] = True
    q = q_all[pair_q]
    moments = {name: (np.zeros_like(x), np.zeros_like(x)) for name, x in (("u", u), ("v", v))}
    beta1, beta2, eps = 0.9, 0.999, 1e-8

    def val_mrr(uu: np.ndarray, vv: np.ndarray) -> float:
        if not val_rows:
            return 0.0
        qv = q_all[val_rows]
        return float(np.mean(reciprocal_ranks(qv + (qv @ vv) @ uu.T, c,
                                              [positives[i] for i in val_rows])))

    base = val_mrr(u, v)
    best = (base, 0, u.copy(), v.copy())
    stale = 0
    n_pairs = len(pair_q)
    for step in range(1, max_steps + 1):
        qv = q @ v
        adapted = q + qv @ u.T
        logits = adapted @ c.T / temperature
        logits[mask] = -np.inf
        logits -= logits.max(axis=1, keepdims=True)
        prob = np.exp(logits)
        prob /= prob.sum(axis=1, keepdims=True)
        prob[np.arange(n_pairs), pair_c] -= 1.0
        d_adapted = (prob @ c) / (temperature * n_pairs)
        grads = {"u": d_adapted.T @ qv + decay * u, "v": q.T @ (d_adapted @ u) + decay * v}
        for name, x in (("u", u), ("v", v)):
            m, s = moments[name]
            m *= beta1
            m += (1 - beta1) * grads[name]
            s *= beta2
            s += (1 - beta2) * grads[name] ** 2
            x -= learning_rate * (m / (1 - beta1 ** step)) / (np.sqrt(s / (1 - beta2 ** step)) + eps)
        if val_rows and step % CHECK_EVERY == 0:
            got = val_mrr(u, v)
            if got > best[0]:
                best, stale = (got, step, u.copy(), v.copy()), 0
            else:
                stale += 1
                if stale >= PATIENCE:
                    break
    if not val_rows:
        best = (0.0, max_steps, u.copy(), v.copy())
    return QueryAdapter(u=best[2].astype(np.float32), v=best[3].astype(np.float32),
                        learning_rate=learning_rate, steps=best[1], pairs=n_pairs,
                        validation_mrr=(base, best[0]))
