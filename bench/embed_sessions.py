"""The archive's document embedding (``MEMARC_EMBED_THREADS`` single-threaded fastembed sessions
at once, :meth:`shared.index.embedding.Embedder.embed_dense_sync`) next to one fastembed session
of that many intra-op threads on the same length-sorted batches of 16, alternately in one
process, on every ``--step``-th BIRD card text by length. No database needed. Run:
``.venv/bin/python bench/embed_sessions.py [--rounds 2] [--step 6]``; prints the seconds of each
and one session / pool (above 1: the pool is faster)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._archive import model_env  # noqa: E402
from bench.recall_quality import bird_cards  # noqa: E402
from shared.config import load_settings  # noqa: E402
from shared.index.embedding import DENSE_BATCH, Embedder  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--step", type=int, default=6, help="every n-th text by length")
    args = ap.parse_args(argv)
    embedder = Embedder(load_settings(model_env()))
    embedder.load(("en",))
    s = embedder.settings
    one = embedder._load_dense("en")  # the query session: embed_threads intra-op threads
    texts = sorted({c.title + "\n" + "\n".join(c.content.values()) for c in bird_cards()},
                   key=len)[::args.step]
    print(f"{len(texts)} texts, {s.embed_threads} sessions / threads")
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        embedder.embed_dense_sync(texts)
        pool_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        list(one.embed(texts, batch_size=DENSE_BATCH))
        one_s = time.perf_counter() - t0
        print(f"pool {pool_s:.1f} s, one session {one_s:.1f} s, one / pool {one_s / pool_s:.2f}",
              flush=True)


if __name__ == "__main__":
    main()
