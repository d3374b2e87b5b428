"""Cost of the privacy filter next to the embedding it guards. Run:
``.venv/bin/python bench/privacy_filter.py [--sample 256]`` (models from ``../shared/models``
when present; no database needed).

Over the BIRD cards shipped with the package: the time to build every card's filtered document
(:func:`shared.projection.documents.projected_document`: texts + payload through the filter) against the
unfiltered one (``projected_text`` + ``payload``), and against embedding (dense + BM25, the
archive's own embedding call) of a sample of the same texts, per card, in the same process. Also
counts the cards the filter changes (false positives: these cards hold no secrets).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shared.cards_file import bundled_cards, read_cards  # noqa: E402
from shared.config import load_settings  # noqa: E402
from shared.index.embedding import Embedder  # noqa: E402
from shared.models import Card  # noqa: E402
from shared.privacy import DEFAULT_FILTER  # noqa: E402
from shared.index.engine import BM25  # noqa: E402
from shared.projection.documents import payload, projected_document, vector_texts  # noqa: E402

MODELS = Path(__file__).resolve().parents[2] / "shared" / "models"


def _cards() -> list[Card]:
    now = datetime.now(timezone.utc)
    return [Card(id=f"mem-00000000-0000-0000-0000-{i:012d}", workspace="bird", family=c.family,
                 title=c.title, scope=c.scope, origin="import", source=None,
                 concepts=list(c.concepts), dependencies=list(c.dependencies), links=[],
                 content=dict(c.content), revision=1, created_at=now, updated_at=now)
            for i, c in enumerate(read_cards(bundled_cards()))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sample", type=int, default=256, help="cards embedded for the comparison")
    args = parser.parse_args()
    env = dict(os.environ)
    for key, folder in (("MEMARC_DENSE_MODEL_PATH", "all-MiniLM-L6-v2-onnx"), ("MEMARC_BM25_MODEL_PATH", "bm25")):
        if not env.get(key) and (MODELS / folder).exists():
            env[key] = str(MODELS / folder)
    cards = _cards()

    t0 = time.perf_counter()
    plain = [(vector_texts(c, []), payload(c)) for c in cards]
    t_plain = time.perf_counter() - t0
    t0 = time.perf_counter()
    filtered = [projected_document(c, DEFAULT_FILTER) for c in cards]
    t_filtered = time.perf_counter() - t0
    changed = sum(1 for (a, _), (b, _) in zip(plain, filtered) if a != b)

    embedder = Embedder(load_settings(env))
    embedder.load(("en",))
    sample = [texts[BM25] for texts, _ in filtered[:: max(1, len(filtered) // args.sample)]][: args.sample]
    t0 = time.perf_counter()
    embedder.embed_documents_sync(sample, "en")
    t_embed = time.perf_counter() - t0

    per_card_filter = (t_filtered - t_plain) / len(cards)
    per_card_embed = t_embed / len(sample)
    print(json.dumps({
        "cards": len(cards),
        "cards_changed_by_filter": changed,
        "document_ms_per_card_unfiltered": round(t_plain / len(cards) * 1000, 4),
        "document_ms_per_card_filtered": round(t_filtered / len(cards) * 1000, 4),
        "filter_ms_per_card": round(per_card_filter * 1000, 4),
        "embedded_sample": len(sample),
        "embed_ms_per_card": round(per_card_embed * 1000, 3),
        "filter_over_embed": round(per_card_filter / per_card_embed, 4),
    }, indent=2))


if __name__ == "__main__":
    main()
