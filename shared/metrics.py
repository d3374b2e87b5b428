"""Prometheus metrics of one process (issue 15), in a registry of its own.

:class:`Metrics` holds a :class:`prometheus_client.CollectorRegistry` per set of process
resources (never the library's global ``REGISTRY``: several apps live in one test process, and
each must count its own requests without a duplicate-registration error). What it measures:

- ``memarc_http_requests_total`` and ``memarc_http_request_duration_seconds`` by method, route
  *template* (``/api/workspaces/{workspace_id}/memory/{card_id}``, never the raw path)
  and status, observed by the writer's middleware (:meth:`Metrics.observe_request`);
- ``memarc_recall_stage_duration_seconds`` by stage (:data:`RECALL_STAGES`), one observation per
  stage of every completed recall (:meth:`Metrics.observe_recall`);
- ``memarc_recall_records_total`` and ``memarc_recall_records_lost_total``: recalls whose
  record (migration 026) was written, and recalls that answered without one because PostgreSQL
  refused it or could not be reached (:meth:`Metrics.observe_recall_record`);
- ``memarc_recalls_total`` by mode and outcome (``results``: at least one card; ``empty``:
  none), and ``memarc_recall_feedback_total`` by verdict, surface (``via``: api, mcp,
  explorer, admin, review) and outcome (``created``, ``updated``, ``unchanged``): the recalls
  and the feedback this process answered and stored (issue 35), per workspace (a
  ``workspace`` label) when ``/metrics`` requires its token, totals otherwise
  (:meth:`Metrics.observe_recall_outcome`, :meth:`Metrics.observe_feedback`);
- ``memarc_index_info``: the index engine and projection format of the process;
- the projection queue, read from PostgreSQL at scrape time (:class:`QueueFigures`, passed to
  :meth:`Metrics.exposition`), so any writer reports the figures of every worker:
  ``memarc_projection_operations`` by status, ``memarc_projection_oldest_pending_seconds``, and
  ``memarc_projection_lag_seconds``, a histogram of the time from the saving transaction to the
  completed projection of every done operation; and ``memarc_database_up``. The first two are
  totals over every workspace, or per workspace (a ``workspace`` label) when ``/metrics``
  requires its token: an open scrape names no workspace id (issue 25, case 7);
- the recall evaluations (issue 34), read at scrape time too: ``memarc_evaluation_recall_at_3``
  by mode and case source, of each workspace's latest finished run (weighted over every
  workspace on an open scrape), and ``memarc_evaluation_regressions_total``, the runs flagged
  as a regression.

Labels carry route templates, methods, statuses, stage names and (behind the token) workspace
ids only: never card content, queries or tokens.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Histogram, Info, generate_latest
from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                   HistogramMetricFamily, Metric)
from prometheus_client.utils import floatToGoString

#: the stages of a recall (DESIGN §5): query embedding, index search (every round), verification
#: in PostgreSQL, link expansion, and the reading of the result cards
RECALL_STAGES = ("embed", "search", "verify", "expand", "fetch")
#: bucket upper bounds (seconds) of the request and recall stage histograms
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: bucket upper bounds (seconds) of the projection lag histogram
LAG_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
#: the statuses of a projection operation
OPERATION_STATUSES = ("pending", "running", "done", "failed")


@dataclass
class WorkspaceQueue:
    """One workspace's projection operations: how many per status, and the age in seconds of
    its oldest pending or running one (None when it has none)."""

    #: the workspace id; None for the totals over every workspace
    workspace: str | None
    by_status: dict[str, int] = field(default_factory=dict)
    oldest_pending_seconds: float | None = None


@dataclass
class QueueFigures:
    """The projection queue as PostgreSQL holds it at one scrape: per workspace
    (:class:`WorkspaceQueue`), and the lag of the done operations as a histogram over
    :data:`LAG_BUCKETS`: ``lag_buckets[i]`` operations took more than ``LAG_BUCKETS[i - 1]``
    and at most ``LAG_BUCKETS[i]`` seconds (the last entry: more than the last bound), with
    their total ``lag_sum`` in seconds. Not cumulative; :meth:`Metrics.exposition` makes it so."""

    workspaces: list[WorkspaceQueue]
    lag_buckets: list[int]
    lag_sum: float
    #: the latest finished recall evaluation of each workspace that has one
    evaluations: list[WorkspaceEvaluation] = field(default_factory=list)


@dataclass
class WorkspaceEvaluation:
    """A workspace's latest finished recall evaluation (issue 34): ``figures`` as the run
    recorded them (``{mode, source, cases, r3, ...}`` each), and how many of its runs were
    regressions."""

    workspace: str | None
    figures: list[dict[str, object]]
    regressions: int


class Metrics:
    """The metrics of one process, in :attr:`registry` (see the module docstring).

    :param engine: the index engine (``qdrant-server``, ``qdrant-edge``, ``qdrant-local`` or
        ``none``); :param projection_format: the projection format this code writes.
    """

    def __init__(self, engine: str = "none", projection_format: int = 0) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        labels = ("method", "route", "status")
        self.requests = Counter("memarc_http_requests", "HTTP requests answered, by method, "
                                "route template and status", labels, registry=self.registry)
        self.request_seconds = Histogram(
            "memarc_http_request_duration_seconds", "Time to answer an HTTP request, by method, "
            "route template and status", labels, buckets=LATENCY_BUCKETS, registry=self.registry)
        self.recall_seconds = Histogram(
            "memarc_recall_stage_duration_seconds", "Time one recall spent in each stage "
            "(embed, search, verify, expand, fetch)", ("stage",), buckets=LATENCY_BUCKETS,
            registry=self.registry)
        self._stages = {stage: self.recall_seconds.labels(stage) for stage in RECALL_STAGES}
        self.recall_records = Counter(
            "memarc_recall_records", "Recalls whose record was written to PostgreSQL",
            registry=self.registry)
        self.recall_records_lost = Counter(
            "memarc_recall_records_lost", "Recalls that answered without their record "
            "(recall_id null): PostgreSQL refused it or could not be reached",
            registry=self.registry)
        #: answered recalls by (workspace, mode, outcome), verdicts by (workspace, verdict,
        #: via, outcome): exposed per workspace or summed (:meth:`exposition`)
        self._recalls: collections.Counter[tuple[str, str, str]] = collections.Counter()
        self._feedback: collections.Counter[tuple[str, str, str, str]] = collections.Counter()
        self.index = Info("memarc_index", "Index engine and projection format of this process",
                          registry=self.registry)
        self.index.info({"engine": engine, "projection_format": str(projection_format)})

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        """Count one answered request of ``route`` (the route template) and its duration."""
        self.requests.labels(method, route, str(status)).inc()
        self.request_seconds.labels(method, route, str(status)).observe(seconds)

    def observe_recall(self, stages: Mapping[str, float]) -> None:
        """One observation per stage of a completed recall (``{stage: seconds}``, the stages of
        :data:`RECALL_STAGES`; other keys are ignored)."""
        for stage, seconds in stages.items():
            child = self._stages.get(stage)
            if child is not None:
                child.observe(seconds)

    def observe_recall_outcome(self, workspace: str, mode: str, results: int) -> None:
        """Count one answered recall of ``workspace`` in ``mode`` with ``results`` cards."""
        self._recalls[(workspace, mode, "results" if results else "empty")] += 1

    def observe_feedback(self, workspace: str, verdict: str, via: str, outcome: str,
                         n: int = 1) -> None:
        """Count ``n`` verdicts stored for ``workspace`` (``outcome``: created, updated or
        unchanged)."""
        if n:
            self._feedback[(workspace, verdict, via, outcome)] += n

    def observe_recall_record(self, written: bool) -> None:
        """Count one recall's record: ``written``, or lost."""
        (self.recall_records if written else self.recall_records_lost).inc()

    def exposition(self, queue: QueueFigures | None, per_workspace: bool = False) -> bytes:
        """The Prometheus text format (0.0.4) of this registry, followed by the queue figures
        read at this scrape (``None``: PostgreSQL could not be reached or its schema is not
        migrated; ``memarc_database_up`` is then 0 and the queue families are absent).

        ``per_workspace``: the queue series carry a ``workspace`` label, one per workspace; when
        false they are totals over every workspace, without the label, so that a scrape names
        no workspace id (the writer asks for them only when ``/metrics`` requires its token)."""
        if queue is not None and not per_workspace:
            queue = _totals(queue)
        usage = [_usage_family("memarc_recalls", "Recalls answered by this process, by mode "
                               "and outcome (results: at least one card; empty: none)",
                               ("mode", "outcome"), self._recalls, per_workspace),
                 _usage_family("memarc_recall_feedback", "Verdicts on recalled cards stored "
                               "by this process, by verdict, surface and outcome (created, "
                               "updated, unchanged)", ("verdict", "via", "outcome"),
                               self._feedback, per_workspace)]
        return generate_latest(_Scrape(self.registry, [*usage, *_queue_families(queue)]))  # type: ignore[arg-type]


def _usage_family(name: str, documentation: str, labels: tuple[str, ...],
                  counts: Mapping[tuple[str, ...], int], per_workspace: bool) -> Metric:
    """A counter family from ``counts`` (keyed by workspace, then ``labels``): one series per
    workspace and labels when ``per_workspace``, else summed over the workspaces."""
    named = ("workspace",) if per_workspace else ()
    family = CounterMetricFamily(name, documentation, labels=(*named, *labels))
    series: dict[tuple[str, ...], int] = {}
    for (workspace, *rest), n in counts.items():
        key = (workspace, *rest) if per_workspace else tuple(rest)
        series[key] = series.get(key, 0) + n
    for key, n in sorted(series.items()):
        family.add_metric(list(key), n)
    return family


class _Scrape:
    """A collector of one scrape: the process registry, then the figures read for it."""

    def __init__(self, registry: CollectorRegistry, extra: list[Metric]) -> None:
        self.registry, self.extra = registry, extra

    def collect(self) -> Iterable[Metric]:
        yield from self.registry.collect()
        yield from self.extra


def _totals(queue: QueueFigures) -> QueueFigures:
    """The figures summed over every workspace, as one unnamed "workspace" (``workspace=None``):
    operations per status added up, the oldest pending age the largest of them."""
    total = WorkspaceQueue(workspace=None)
    for ws in queue.workspaces:
        for status, n in ws.by_status.items():
            total.by_status[status] = total.by_status.get(status, 0) + n
        if ws.oldest_pending_seconds is not None:
            total.oldest_pending_seconds = max(total.oldest_pending_seconds or 0.0,
                                               ws.oldest_pending_seconds)
    # the evaluations as one: each mode and source's r@3 over every workspace's latest run,
    # weighted by its number of cases; the regressions added up
    weighted: dict[tuple[str, str], list[float]] = {}
    for ev in queue.evaluations:
        for f in ev.figures:
            acc = weighted.setdefault((str(f["mode"]), str(f["source"])), [0.0, 0.0])
            acc[0] += float(f["r3"]) * float(f["cases"])  # type: ignore[arg-type]
            acc[1] += float(f["cases"])  # type: ignore[arg-type]
    evaluations = [WorkspaceEvaluation(
        workspace=None, regressions=sum(ev.regressions for ev in queue.evaluations),
        figures=[{"mode": m, "source": src, "cases": n, "r3": total / n if n else 0.0}
                 for (m, src), (total, n) in sorted(weighted.items())])]
    return QueueFigures(workspaces=[total], lag_buckets=queue.lag_buckets, lag_sum=queue.lag_sum,
                        evaluations=evaluations)


def _queue_families(queue: QueueFigures | None) -> Iterator[Metric]:
    up = GaugeMetricFamily("memarc_database_up", "1 when this scrape read the projection queue "
                           "from PostgreSQL, 0 when it could not: PostgreSQL could not be "
                           "reached or its schema is not migrated to this version")
    up.add_metric([], 0 if queue is None else 1)
    yield up
    if queue is None:
        return
    named = [] if queue.workspaces and queue.workspaces[0].workspace is None else ["workspace"]
    ops = GaugeMetricFamily("memarc_projection_operations", "Projection operations by status "
                            "(and workspace, when /metrics requires its token), read from "
                            "PostgreSQL at scrape time", labels=(*named, "status"))
    oldest = GaugeMetricFamily("memarc_projection_oldest_pending_seconds", "Age of the oldest "
                               "pending or running projection operation (of a workspace, when "
                               "/metrics requires its token; 0 when none)", labels=named)
    for ws in queue.workspaces:
        label = [ws.workspace] if named else []
        for status in OPERATION_STATUSES:
            ops.add_metric([*label, status], ws.by_status.get(status, 0))
        oldest.add_metric(label, ws.oldest_pending_seconds or 0.0)
    lag = HistogramMetricFamily("memarc_projection_lag_seconds", "Time from the transaction that "
                                "queued a projection operation to its completion, over every done "
                                "operation (read from PostgreSQL at scrape time)")
    cumulative, buckets = 0, []
    for bound, n in zip((*LAG_BUCKETS, float("inf")), queue.lag_buckets):
        cumulative += n
        buckets.append((floatToGoString(bound), cumulative))
    lag.add_metric([], buckets, queue.lag_sum)
    yield from (ops, oldest, lag)
    r3 = GaugeMetricFamily("memarc_evaluation_recall_at_3", "Share of evaluation cases whose "
                           "expected card was in the top 3, in the latest finished recall "
                           "evaluation (by mode and case source; over every workspace, weighted "
                           "by cases, unless /metrics requires its token)",
                           labels=(*named, "mode", "source"))
    regressions = CounterMetricFamily("memarc_evaluation_regressions", "Recall evaluation runs "
                                      "flagged as a regression (paired test against the run "
                                      "before), read from PostgreSQL at scrape time",
                                      labels=named)
    for ev in queue.evaluations:
        label = [ev.workspace] if named else []
        for f in ev.figures:
            r3.add_metric([*label, str(f["mode"]), str(f["source"])], round(float(f["r3"]), 4))  # type: ignore[arg-type]
        regressions.add_metric(label, ev.regressions)
    if not queue.evaluations and not named:
        regressions.add_metric([], 0)
    yield from (r3, regressions)
