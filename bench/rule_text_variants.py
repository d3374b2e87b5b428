"""What a rule's dense text should be (issue 27, "what the rule's text is"), offline: on every set
of ``bench/rule_sets_data.py``, the dense model's ranking of the query's database's rules
(workspace-wide for ``lint``) by cosine to the query, for each text a rule could be embedded as:

- ``own``: what the ``own`` vector embeds (``projected_text``: title, rule, concepts, objects);
- ``title+rule``: title and rule only;
- ``rule``: the rule alone (what the ``key`` vector embeds for a ``sql_rule``);
- ``rule+rule``: ``own`` with the title replaced by the rule (a title that repeats its rule, as
  BIRD's bundled cards have).

Dense only, numpy, no database, no verification or fusion: a comparison of texts, not of recall.
r@1 / r@3 per set and half. Run: ``.venv/bin/python bench/rule_text_variants.py``.
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._archive import model_env  # noqa: E402
from bench.rule_sets_data import all_sets  # noqa: E402
from shared.config import load_settings  # noqa: E402
from shared.index.embedding import Embedder  # noqa: E402
from shared.projection.documents import projected_text  # noqa: E402
from tools.bird_cards import make_title  # noqa: E402

VARIANTS = ("own", "title+rule", "rule", "rule+rule")


def texts_of(card) -> dict[str, str]:
    """The text of ``card`` (an ImportCard) under each variant."""
    as_card = SimpleNamespace(title=card.title, content=card.content, scope=card.scope,
                              concepts=card.concepts, dependencies=card.dependencies)
    repeated = SimpleNamespace(**(vars(as_card) | {"title": make_title(card.content["rule"])}))
    return {"own": projected_text(as_card),  # type: ignore[arg-type]
            "title+rule": f"{card.title}\n{card.content['rule']}",
            "rule": card.content["rule"],
            "rule+rule": projected_text(repeated)}  # type: ignore[arg-type]


def main() -> None:
    t0 = time.perf_counter()
    embedder = Embedder(load_settings(model_env()))
    embedder.load(("en",))
    print("| set | half | n | " + " | ".join(VARIANTS) + " |")
    print("|" + " --- |" * (len(VARIANTS) + 3))
    for rule_set in all_sets():
        texts = {c.key: texts_of(c) for c in rule_set.cards}
        db_of = {c.key: (c.dependencies[0].database if c.dependencies else None)
                 for c in rule_set.cards}
        unique = sorted({t for v in texts.values() for t in v.values()})
        vec = dict(zip(unique, np.asarray(embedder.embed_dense_sync(unique, "en"))))
        queries = sorted({q.text for q in rule_set.queries})
        qvec = {q: np.asarray(embedder.embed_query_sync(q, "en")[0]) for q in queries}
        per: dict[tuple, list] = defaultdict(list)
        for q in rule_set.queries:
            pool = [k for k in texts if q.database is None or db_of[k] == q.database]
            for variant in VARIANTS:
                scores = np.array([vec[texts[k][variant]] @ qvec[q.text] for k in pool])
                order = [pool[i] for i in np.argsort(-scores, kind="stable")]
                per[(q.half, variant)].append(order.index(q.wanted) + 1)
        for half in ("TUNE", "REPORT"):
            n = len(per[(half, "own")])
            cells = [f"{sum(r <= 1 for r in per[(half, v)]) / n:.3f} / "
                     f"{sum(r <= 3 for r in per[(half, v)]) / n:.3f}" for v in VARIANTS]
            print(f"| {rule_set.name} | {half} | {n} | " + " | ".join(cells) + " |", flush=True)
    print(f"({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
