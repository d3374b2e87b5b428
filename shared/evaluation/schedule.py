"""When the worker runs an evaluation by itself (issue 34): :func:`due`.

The worker's sweep reads every workspace's state (migration 024's ``evaluation_states``) every
:data:`CHECK_SECONDS` and queues a run for each workspace where one is due. Nothing is due while
projection work or a rebuild is open (the index has not settled: a run now would measure cards
that are still pending), while a run is queued or running, or in a workspace with no projected
card. Otherwise, in this order, a run is due with the trigger:

- ``import``: an import created or changed cards since the newest run, or there is no run yet
  and one did (the demo's first evaluation); a re-import that changed nothing is no trigger;
- ``first``: no run yet;
- ``model``: the newest run was made with another model fingerprint (the dense model files or
  the BM25 configuration of the workspace's language changed);
- ``format``: with another projection format;
- ``profile``: with other fusion profiles;
- ``rebuild``: an index rebuild finished since the newest run;
- ``schedule``: the newest run is ``MEMARC_EVAL_EVERY_HOURS`` old.

A failed newest run is retried (trigger ``retry``, or one of the above) only :data:`RETRY_FAILED_SECONDS` after it was
queued, so a dependency that keeps failing does not queue a run at every check.
``MEMARC_EVAL_EVERY_HOURS=0`` turns automatic runs off.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from shared import models

CHECK_SECONDS = 10.0
RETRY_FAILED_SECONDS = 600.0


def due(state: dict[str, Any], *, fingerprint: str, profile_digest: str, now: datetime,
        every_hours: float) -> str | None:
    """The trigger of the run due in a workspace of ``state`` (a row of
    :func:`shared.store.evaluations.states`), or None; ``fingerprint``: this process's model
    fingerprint for the workspace's language, ``profile_digest``: its fusion profiles'
    (:func:`shared.evaluation.run.profiles_digest`)."""
    if every_hours <= 0 or state["open_work"] or state["open_run"] or not state["projected"]:
        return None
    last = state["last_run_at"]
    imported = state["last_import_at"]
    if last is None:
        return "import" if imported is not None else "first"
    if (state["last_status"] == "failed"
            and (now - last).total_seconds() < RETRY_FAILED_SECONDS):
        return None
    if imported is not None and imported > last:
        return "import"
    if state["last_status"] == "done":
        if state["last_fingerprint"] != fingerprint:
            return "model"
        if state["last_format"] != models.PROJECTION_FORMAT:
            return "format"
        if state["last_profile_digest"] != profile_digest:
            return "profile"
    rebuilt = state["last_rebuild_at"]
    if rebuilt is not None and rebuilt > last:
        return "rebuild"
    if state["last_status"] == "failed":
        return "retry"
    if (now - last).total_seconds() >= every_hours * 3600:
        return "schedule"
    return None
