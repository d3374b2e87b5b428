"""What the writer's routes share: the types of their path and query parameters (each defined
once, with its bounds and its OpenAPI description), and the header of an idempotent replay."""

from __future__ import annotations

from typing import Annotated

from litestar import Response
from litestar.params import Parameter

from shared import models

WorkspaceId = Annotated[str, Parameter(description="Workspace id", max_length=63)]
CardId = Annotated[str, Parameter(description="Card id, mem-<UUID>", max_length=60)]
SessionId = Annotated[str, Parameter(description="Session id of the caller's workflow",
                                     max_length=200)]
RebuildId = Annotated[str, Parameter(max_length=40)]
RecallId = Annotated[str, Parameter(description="Recall id (the recall's `recall_id`, a UUID)",
                                    max_length=40)]
Wait = Annotated[float | None, Parameter(
    description="Seconds (0..30) to wait for the index update (a card's projection, or a "
                "schema-change run's point deletions) to complete",
    ge=0, le=int(models.MAX_WAIT_SECONDS))]
#: the largest ``offset`` of the pending and activity pages (a bound, so a huge number is a 400
#: naming the parameter rather than PostgreSQL's "bigint out of range")
MAX_OFFSET = 1_000_000_000
Offset = Annotated[int, Parameter(ge=0, le=MAX_OFFSET)]

#: The header of an answer that an idempotent replay (a review id or a schema-change run id
#: delivered again) gives unchanged.
REPLAYED = "Idempotent-Replayed"


def replayed(content: object, was_replayed: bool, status_code: int = 200) -> Response:
    """A response of ``content``, with ``Idempotent-Replayed: true`` when ``was_replayed``."""
    return Response(content=content, status_code=status_code,
                    headers={REPLAYED: "true"} if was_replayed else None)
