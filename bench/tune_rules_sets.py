"""Choose the ``rules`` profile for the worst case over the rule sets' TUNE halves (issue 27),
offline, on the branch lists ``bench/rules_branch_cache.py`` recorded.

``--check``: the offline fusion (:func:`shared.recall.fusion.fuse` on the recorded branches,
cut to the top 10) must give exactly the real recall's ranking for the product's current
profile and for the dense-only and BM25-only peers, on every recorded query; the script stops
otherwise. Only then are candidates worth evaluating offline.

Candidates (all over the four branches of ``rules`` mode: ``key``, ``key_bm25``, ``own``,
``own_bm25``): DBSF (clipped or not) and RRF (k 10 / 30 / 60) with every weight in
:data:`GRID`, and DBSF with per-query confidence weighting (each branch's weight times
``1 + c × gap``, ``gap`` the branch's best score above its second in units of its score's
standard deviation; :func:`shared.recall.fusion.dbsf_fuse`). Checks: each TUNE set at r@1 and
r@3, and each of its tags (``evidence neardup``, ``lint case``, ``bird-a db``, ``bird-a ws``).
Selection rules, each written before its run:

- ``--objective ratio`` (stop 30, five sets): the largest smallest ratio ``candidate /
  max(dense only, BM25 only)`` over the checks; ties (within 1e-9) by the larger mean ratio, then
  by the smaller weight sum and the name.
- ``--objective margin`` (stop 31, six sets with ``bird-a`` and the larger ``lint``): the
  largest smallest paired margin over the checks (:func:`paired_margin`: ``(W - L) / sqrt(W + L)``
  against each peer, so a tie scores 0 and a lead counts in units of the check's own noise), then
  as ``ratio``. (Run: every candidate's smallest margin was 0, a tie at ``critic`` r@1, so it
  did not separate them.)
- ``--objective pass`` (stop 31, same checks): the done-when's own test, estimated on TUNE: the
  share of :data:`RESAMPLES` paired resamples (each check's pairs drawn with replacement, seed
  27, the same draws for every candidate and the peers) in which the candidate is at or above
  both peers at r@1 and r@3 on every check (:class:`PassRate`); only profiles the product
  implements whose smallest ratio on TUNE itself is at least 0.97; ties as ``ratio``.

REPORT is never read (the cache holds TUNE only).

Run: ``.venv/bin/python bench/tune_rules_sets.py [--cache FILE ...] [--check] [--top N]``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import uuid
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.recall_quality import PEERS  # noqa: E402
from bench.rules_branch_cache import OUT  # noqa: E402
from shared.index.engine import KEY, KEY_BM25, OWN, OWN_BM25  # noqa: E402
from shared.recall.fusion import FusionProfile, fuse  # noqa: E402
from shared.recall.profiles import profile_for  # noqa: E402

GRID = (0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0)
CONFIDENCE = (0.25, 0.5, 1.0, 1.5, 2.0)
BRANCHES = (KEY, KEY_BM25, OWN, OWN_BM25)
PEER_NAMES = ("dense only", "BM25 only")
TOP = 10


def load(*paths: Path) -> dict[str, list[dict]]:
    """The recorded sets of every file, every branch list as ``[(UUID, score), …]``."""
    data: dict[str, Any] = {"sets": {}}
    for path in paths:
        part = json.loads(path.read_text())
        if part.get("half", "TUNE") != "TUNE":
            raise SystemExit(f"{path} holds {part['half']}, not TUNE: nothing is tuned on it")
        data["sets"].update(part["sets"])
    for entries in data["sets"].values():
        for e in entries:
            for side in ("product", "peer"):
                e[side] = [{n: [(uuid.UUID(i), s) for i, s in hits] for n, hits in call.items()}
                           for call in e[side]]
    return data["sets"]


def ranking(branches: dict[str, list], profile: FusionProfile) -> list[str]:
    """The top ids of the fused branches, as recall returns them for cards without links."""
    return [str(cid) for cid, _ in fuse(branches, profile)[:TOP]]


def check(sets: dict[str, list[dict]]) -> int:
    """Compare the offline rankings with the recorded real ones; returns the number compared.

    :raises SystemExit: a ranking differs, or a recall needed more than one round."""
    n = 0
    for name, entries in sets.items():
        for e in entries:
            if len(e["product"]) != 1 or e["peer_calls"] != len(PEER_NAMES):
                raise SystemExit(f"{name}: {e['text']!r} took more than one round")
            pairs = [("product", e["product"][0], profile_for("rules"))]
            pairs += [(p, e["peer"][0], PEERS[p]) for p in PEER_NAMES]
            for config, branches, profile in pairs:
                if ranking(branches, profile) != e["real"][config]:
                    raise SystemExit(f"{name}: {config} differs offline for {e['text']!r}")
                n += 1
    return n


def checks(sets: dict[str, list[dict]]) -> dict[str, list[tuple[dict, str]]]:
    """``{check: [(entry, wanted id), …]}``: each set's TUNE pairs, and ``evidence neardup``."""
    out: dict[str, list[tuple[dict, str]]] = {}
    for name, entries in sets.items():
        for e in entries:
            for w in e["wanted"]:
                if w["half"] != "TUNE":
                    continue
                out.setdefault(name, []).append((e, w["id"]))
                for tag in w["tags"]:
                    out.setdefault(f"{name} {tag}", []).append((e, w["id"]))
    return out


def scores(pairs: list[tuple[dict, str]], rank_of: Any) -> tuple[float, float]:
    """(r@1, r@3) of ``pairs`` with ``rank_of(entry)`` giving the entry's top ids."""
    memo: dict[int, list[str]] = {}
    hit1 = hit3 = 0
    for e, wanted in pairs:
        if id(e) not in memo:
            memo[id(e)] = rank_of(e)
        top = memo[id(e)]
        hit1 += bool(top[:1] == [wanted])
        hit3 += wanted in top[:3]
    return hit1 / len(pairs), hit3 / len(pairs)


class Batch:
    """Every recorded entry's branches as padded arrays over its candidate cards (sorted by id
    text, so that a stable sort on the fused score breaks ties by id as :func:`fuse` does), for
    a fast equivalent of :func:`fuse` in the search (the rows shown are re-checked with
    :func:`fuse` itself): DBSF-normalised scores (unclipped and clipped), min-max-normalised
    scores, ``rank`` (inf where absent), and per branch the confidence gaps ``(s₁ - s₂) / σ``
    (``gap``) and ``(s₁ - μ) / σ`` (``z``)."""

    def __init__(self, entries: list[dict]):
        self.row = {id(e): n for n, e in enumerate(entries)}
        self.ids: list[list[str]] = []
        width = max(len({str(c) for b in BRANCHES for c, _ in e["product"][0].get(b, [])})
                    for e in entries)
        shape = (len(entries), width, len(BRANCHES))
        self.norm, self.clip, self.minmax = np.zeros(shape), np.zeros(shape), np.zeros(shape)
        self.rank = np.full(shape, np.inf)
        self.present = np.zeros(shape, dtype=bool)
        self.gap = np.zeros((len(entries), len(BRANCHES)))
        self.z = np.zeros((len(entries), len(BRANCHES)))
        for n, e in enumerate(entries):
            branches = e["product"][0]
            ids = sorted({str(c) for b in BRANCHES for c, _ in branches.get(b, [])})
            self.ids.append(ids)
            pos = {i: k for k, i in enumerate(ids)}
            for j, b in enumerate(BRANCHES):
                hits = branches.get(b, [])
                if not hits:
                    continue
                values = np.array([v for _, v in hits])
                mean, sd = values.mean(), values.std()
                lo, hi = values.min(), values.max()
                if sd > 0 and len(values) > 1:
                    first, second = sorted(values, reverse=True)[:2]
                    self.gap[n, j] = (first - second) / sd
                    self.z[n, j] = (first - mean) / sd
                for r, (cid, v) in enumerate(hits, start=1):
                    i = pos[str(cid)]
                    x = (v - (mean - 3 * sd)) / (6 * sd) if sd > 0 else 0.5
                    self.norm[n, i, j], self.clip[n, i, j] = x, min(1.0, max(0.0, x))
                    self.minmax[n, i, j] = (v - lo) / (hi - lo) if hi > lo else 1.0
                    self.rank[n, i, j], self.present[n, i, j] = r, True

    def pairs(self, pairs: list[tuple[dict, str]]) -> tuple[np.ndarray, np.ndarray]:
        """Row and candidate position of each (entry, wanted) pair (-1: not a candidate)."""
        rows = np.array([self.row[id(e)] for e, _ in pairs])
        where = np.array([self.ids[self.row[id(e)]].index(w) if w in self.ids[self.row[id(e)]]
                          else -1 for e, w in pairs])
        return rows, where

    def top3(self, spec: dict) -> np.ndarray:
        """Each entry's three best candidate positions under ``spec`` (-1: none)."""
        w = np.array(spec["w"], dtype=float)
        method, c = spec["method"], spec.get("confidence", 0.0)
        if method == "rrf":
            fused = (w / (spec.get("k", 60) + self.rank)).sum(axis=2)
        else:
            conf = self.z if spec.get("conf_z") else self.gap
            eff = w[None, :] * (1.0 + c * conf) if c else np.broadcast_to(w, self.gap.shape)
            mat = (self.minmax if method == "minmax"
                   else self.clip if spec.get("clip") else self.norm)
            fused = np.einsum("edb,eb->ed", mat, eff)
        live = self.present[:, :, w > 0].any(axis=2)
        fused = np.where(live, fused, -np.inf)
        order = np.argsort(-fused, axis=1, kind="stable")[:, :3]
        return np.where(np.take_along_axis(live, order, axis=1), order, -1)


def batch_scores(top3: np.ndarray, rows: np.ndarray, where: np.ndarray) -> tuple[float, float]:
    """(r@1, r@3) of the pairs (``rows``, ``where``) under an entry's top-3 positions."""
    got = top3[rows]
    hit = (got == where[:, None]) & (where[:, None] >= 0)
    return float(hit[:, 0].mean()), float(hit.any(axis=1).mean())


def pair_hits(top3: np.ndarray, rows: np.ndarray, where: np.ndarray) -> np.ndarray:
    """``(n, 2)`` booleans: each pair's wanted card first, and in the top 3."""
    ok = (top3[rows] == where[:, None]) & (where[:, None] >= 0)
    return np.stack([ok[:, 0], ok.any(axis=1)], axis=1)


def peer_hits(by_check: dict) -> dict[str, list[np.ndarray]]:
    """Per check, each peer's :func:`pair_hits` (as recorded, through :func:`fuse`)."""
    out = {}
    for c, pairs in by_check.items():
        out[c] = []
        for p in PEER_NAMES:
            tops = [ranking(e["peer"][0], PEERS[p]) for e, _ in pairs]
            out[c].append(np.array([[t[:1] == [w], w in t[:3]]
                                    for t, (_, w) in zip(tops, pairs)]))
    return out


def paired_margin(mine: np.ndarray, peers: list[np.ndarray]) -> float:
    """The smallest paired margin of a candidate over the peers on one check, at r@1 and r@3:
    ``(W - L) / sqrt(W + L)`` with W the pairs the candidate finds and the peer misses, L the
    reverse (the sign test's / McNemar's z; 0 where they never disagree). A tie at the check's
    figure scores 0, a lead of a few queries out of many disagreements scores little: the rule
    of selection "a margin, not a tie" in units of the check's own noise."""
    out = np.inf
    for peer in peers:
        wins = (mine & ~peer).sum(axis=0)
        losses = (~mine & peer).sum(axis=0)
        n = wins + losses
        z = np.where(n > 0, (wins - losses) / np.sqrt(np.maximum(n, 1)), 0.0)
        out = min(out, float(z.min()))
    return out


def bootstrap(batch: Batch, spec: dict, where: dict, peers: dict, n: int) -> float:
    """Share of ``n`` resamples (with replacement, each check's pairs, seed 27) in which the
    candidate's r@1 and r@3 are at or above both peers' on every check: how likely a half of
    this size and kind is to show the candidate level with or above the peers."""
    rng = np.random.default_rng(27)
    mine = batch.top3(spec)
    hits = {c: (pair_hits(mine, *where[c]), peers[c]) for c in where}
    wins = 0
    for _ in range(n):
        good = True
        for c, (m, ps) in hits.items():
            idx = rng.integers(0, len(m), len(m))
            mm = m[idx].mean(axis=0)
            if any((mm < p[idx].mean(axis=0) - 1e-12).any() for p in ps):
                good = False
                break
        wins += good
    return wins / n


RESAMPLES = 500


class PassRate:
    """The ``pass`` objective (module docstring), vectorised: per check, a ``(RESAMPLES, n)``
    matrix of how often each pair is drawn, so a resampled r@1 / r@3 is one matrix product."""

    def __init__(self, where: dict, peers: dict, resamples: int = RESAMPLES):
        rng = np.random.default_rng(27)
        self.where, self.draws, self.best = where, {}, {}
        for c in sorted(where):
            n = len(where[c][0])
            draws = np.zeros((resamples, n))
            for b in range(resamples):
                np.add.at(draws[b], rng.integers(0, n, n), 1.0)
            self.draws[c] = draws / n
            self.best[c] = np.maximum.reduce([self.draws[c] @ p.astype(float) for p in peers[c]])

    def __call__(self, top3: np.ndarray) -> float:
        ok = np.ones(next(iter(self.draws.values())).shape[0], dtype=bool)
        for c, draws in self.draws.items():
            mine = draws @ pair_hits(top3, *self.where[c]).astype(float)
            ok &= (mine >= self.best[c] - 1e-12).all(axis=1)
        return float(ok.mean())


def candidates(confidence: tuple[float, ...] | None = None) -> list[tuple[str, dict]]:
    """The candidate profiles (module docstring) as ``(label, spec)``; the current one first.
    ``confidence``: the confidence values tried instead of :data:`CONFIDENCE` (0 is always
    tried)."""
    cur = profile_for("rules")
    out = [("current " + cur.describe(), {"method": cur.method, "k": cur.k, "clip": cur.clip,
                                          "confidence": cur.confidence,
                                          "w": tuple(cur.weights.get(b, 0.0) for b in BRANCHES)})]
    for ws in itertools.product(GRID, repeat=len(BRANCHES)):
        if not any(ws):
            continue
        tag = "/".join(f"{w:g}" for w in ws)
        for c in (0.0, *(confidence or CONFIDENCE)):
            out.append((f"dbsf c={c:g} {tag}", {"method": "dbsf", "w": ws, "confidence": c}))
            out.append((f"dbsf clip c={c:g} {tag}", {"method": "dbsf", "w": ws, "clip": True,
                                                    "confidence": c}))
            if c:
                out.append((f"dbsf z c={c:g} {tag}", {"method": "dbsf", "w": ws,
                                                      "confidence": c, "conf_z": True}))
            out.append((f"minmax c={c:g} {tag}", {"method": "minmax", "w": ws,
                                                  "confidence": c}))
        for k in (10, 30, 60):
            out.append((f"rrf k={k} {tag}", {"method": "rrf", "w": ws, "k": k}))
    return out


def as_profile(spec: dict) -> FusionProfile | None:
    """A candidate's spec as the product's :class:`FusionProfile` (None: not one the product
    implements)."""
    if spec["method"] == "minmax" or spec.get("conf_z"):
        return None
    return FusionProfile(method=spec["method"], weights=dict(zip(BRANCHES, spec["w"])),
                         k=spec.get("k", 60), clip=spec.get("clip", False),
                         confidence=spec.get("confidence", 0.0))


def parse_candidate(label: str) -> FusionProfile:
    """A candidate's label as printed (``dbsf [clip ]c=C k/kb/o/ob`` or ``rrf k=K k/kb/o/ob``,
    weights of ``key``, ``key_bm25``, ``own``, ``own_bm25``) as the product's profile.

    :raises ValueError: not such a label."""
    parts = label.split()
    weights = dict(zip(BRANCHES, (float(w) for w in parts[-1].split("/"))))
    if len(weights) != len(BRANCHES):
        raise ValueError(f"{label!r}: four weights wanted")
    if parts[0] == "rrf" and len(parts) == 3 and parts[1].startswith("k="):
        return FusionProfile(method="rrf", weights=weights, k=int(parts[1][2:]))
    if parts[0] == "dbsf" and parts[-2].startswith("c=") and parts[1:-2] in ([], ["clip"]):
        return FusionProfile(method="dbsf", weights=weights, clip=parts[1:-2] == ["clip"],
                             confidence=float(parts[-2][2:]))
    raise ValueError(f"{label!r} is not a product profile's label")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", type=Path, nargs="+", default=[OUT],
                    help="one or more files of rules_branch_cache.py (their sets are merged)")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--only", default=None, help="evaluate only candidates containing this")
    ap.add_argument("--bootstrap", type=int, default=0,
                    help="also resample each TUNE check's pairs N times: the share of resamples "
                         "in which each shown candidate is at or above both peers on every check")
    ap.add_argument("--objective", choices=["ratio", "margin", "pass"], default="ratio",
                    help="ratio: the largest smallest ratio to the better peer (ties by the mean "
                         "ratio); margin: the largest smallest paired margin (paired_margin), "
                         "ties by the smallest ratio, then the mean ratio")
    ap.add_argument("--confidence", default=None,
                    help="comma-separated confidence values (default: CONFIDENCE)")
    args = ap.parse_args(argv)
    sets = load(*args.cache)
    if args.check:
        print(f"offline = real on {check(sets)} rankings")
        return
    by_check = checks(sets)
    names = sorted(by_check)
    peer_rows = {peer: {c: scores(by_check[c], lambda e, p=peer: ranking(e["peer"][0], PEERS[p]))
                        for c in names} for peer in PEER_NAMES}
    best = {c: tuple(max(peer_rows[p][c][i] for p in PEER_NAMES) for i in (0, 1)) for c in names}
    batch = Batch([e for entries in sets.values() for e in entries])
    where = {c: batch.pairs(by_check[c]) for c in names}
    peers = peer_hits(by_check)
    pass_rate = PassRate(where, peers) if args.objective == "pass" else None

    def ratios(got: dict[str, tuple[float, float]]) -> list[float]:
        return [got[c][i] / best[c][i] if best[c][i] else 1.0 for c in names for i in (0, 1)]

    rows = []
    conf = tuple(float(c) for c in args.confidence.split(",")) if args.confidence else None
    for label, spec in candidates(conf):
        if args.only and args.only not in label and not label.startswith("current"):
            continue
        top3 = batch.top3(spec)
        got = {c: batch_scores(top3, *where[c]) for c in names}
        r = ratios(got)
        if pass_rate is not None:
            if (min(r) < 0.97 or as_profile(spec) is None) and not label.startswith("current"):
                continue
            margin = pass_rate(top3)
        else:
            margin = min(paired_margin(pair_hits(top3, *where[c]), peers[c]) for c in names)
        rows.append((min(r), sum(r) / len(r), float(sum(spec["w"])), label, got, spec, margin))
    if args.objective in ("margin", "pass"):
        rows.sort(key=lambda r: (-r[6], -r[0], -r[1], r[2], r[3]))
    else:
        rows.sort(key=lambda r: (-r[0], -r[1], r[2], r[3]))
    head = "pass" if args.objective == "pass" else "margin"
    print(f"{'candidate':40} {'min':>6} {'mean':>6} {head:>6}  "
          + "  ".join(f"{c:>17}" for c in names))
    for peer in PEER_NAMES:
        print(f"{peer:40} {'':>6} {'':>6} {'':>6}  " + "  ".join(
            f"{peer_rows[peer][c][0]:.3f} / {peer_rows[peer][c][1]:.3f}".rjust(17) for c in names))
    print("n: " + ", ".join(f"{c} {len(by_check[c])}" for c in names))
    shown = [r for r in rows if r[3].startswith("current")] + rows[:args.top]
    for mn, mean, _, label, got, spec, margin in shown:
        profile = as_profile(spec)
        mark = "  (not in the product)"
        if profile is not None:
            exact = {c: scores(by_check[c], lambda e, pr=profile: ranking(e["product"][0], pr))
                     for c in names}
            mark = "" if exact == got else f"  (fuse differs: min {min(ratios(exact)):.3f})"
        if args.bootstrap:
            mark += f"  bootstrap {bootstrap(batch, spec, where, peers, args.bootstrap):.2f}"
        print(f"{label[:40]:40} {mn:6.3f} {mean:6.3f} {margin:6.2f}  " + "  ".join(
            f"{got[c][0]:.3f} / {got[c][1]:.3f}".rjust(17) for c in names) + mark)
    print(f"{len(rows)} candidates")


if __name__ == "__main__":
    main()
