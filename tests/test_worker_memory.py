"""The embedding worker's memory does not stay at its largest batch (issue 25, case 3).

Before, dense batches were 16 texts whatever their length and onnxruntime's CPU arena kept what
the largest batch needed: one batch of 16 texts at the model's 512-token context left the process
about 1.5 GB larger for good (``bench/worker_memory.py``). The measurement runs in a fresh child
process, so the rest of the test session does not blur its resident set size.
"""

from __future__ import annotations

import json
import subprocess
import sys

from helpers import ROOT, model_env

#: most the resident set may grow (MB) from after a short batch to after the long ones; measured
#: on the loaded 2-core machine: +1,306 MB before, +1 MB after
GROWTH_BOUND_MB = 500

CHILD = """
import json, sys
from pathlib import Path
from shared.config import load_settings
from shared.index.embedding import Embedder

def rss():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

embedder = Embedder(load_settings(json.loads(sys.argv[1])))
embedder.load(("en",))
embedder.embed_dense_sync([f"rule {i} amounts are in EUR" for i in range(64)])
idle = rss()
words = "select from where join orders customers amount total region status".split()
for r in range(2):
    texts = [" ".join(words[(i + j + r) % len(words)] for j in range(1500)) for i in range(16)]
    embedder.embed_dense_sync(texts)
embedder.embed_dense_sync([f"rule {i} amounts are in USD" for i in range(64)])
print(json.dumps({"idle": idle, "after": rss()}))
"""


def test_memory_after_long_batches_goes_back_near_idle():
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(model_env())], cwd=ROOT,
                         check=True, capture_output=True, text=True, timeout=600).stdout
    figures = json.loads(out.strip().splitlines()[-1])
    growth = figures["after"] - figures["idle"]
    assert growth < GROWTH_BOUND_MB, (
        f"resident memory grew {growth:.0f} MB over 2 calls of 16 texts at the model's "
        f"context and stayed there ({figures})")
