"""Build a Qdrant Edge shard's HNSW graph in a process of its own.

``python -m shared.index.edge_optimize SHARD_FOLDER`` loads the shard, runs ``EdgeShard.optimize()``
(Qdrant's segment optimizers: HNSW for the dense vectors, payload indexes, vacuum) and closes it,
printing ``{"optimized": true|false, "seconds": S}``. It runs apart because ``optimize()`` holds
Python's GIL for its whole run (about 30 s for 100k cards on 2 cores, ``bench/recall_latency.py
--hnsw``): in-process it would freeze the writer, the explorer and recall. The caller guarantees
that no other process or handle uses the shard meanwhile (``QdrantEdgeEngine.optimize_collection``
is only called on a rebuild's private shard).
"""

from __future__ import annotations

import json
import sys
import time


def main(argv: list[str]) -> int:
    import qdrant_edge as qe

    if len(argv) != 1:
        print("usage: python -m shared.index.edge_optimize SHARD_FOLDER", file=sys.stderr)
        return 2
    started = time.perf_counter()
    shard = qe.EdgeShard.load(argv[0])
    try:
        changed = shard.optimize()
        shard.flush()
    finally:
        shard.close()
    print(json.dumps({"optimized": bool(changed), "seconds": round(time.perf_counter() - started, 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
