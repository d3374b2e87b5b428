"""Who sees which workspace: Datasette actors and permissions (DESIGN §10).

The explorer asks Datasette for the ``memarc-view-workspace`` permission with the workspace id as
the resource. This plugin grants it to the root actor and to actors mapped in the plugin
configuration; any other permission plugin may grant it too. Without it a workspace is invisible:
never listed, and every page under it answers 404 exactly like a missing workspace.
"""

from __future__ import annotations

from typing import Any

from shared.errors import NotFound
from shared.store.bootstrap import WORKSPACE_RE

from . import config

VIEW_WORKSPACE = "memarc-view-workspace"
ROOT_ACTOR_ID = "root"


def grants(datasette: Any, actor: dict[str, Any] | None, workspace: Any) -> bool | None:
    """This plugin's answer for ``memarc-view-workspace``: True when granted, else None (no
    opinion, so another plugin may still grant it; Datasette's default is to deny)."""
    if not actor or not isinstance(workspace, str):
        return None
    actor_id = actor.get("id")
    if not isinstance(actor_id, str):
        return None
    if actor_id == ROOT_ACTOR_ID:
        return True
    allowed = config.load(datasette).workspaces_of(actor_id)
    if allowed is None or workspace in allowed:
        return True
    return None


async def can_view(datasette: Any, actor: dict[str, Any] | None, workspace: str) -> bool:
    """True when ``actor`` may see ``workspace`` (Datasette's permission check, default deny)."""
    return bool(await datasette.permission_allowed(actor, VIEW_WORKSPACE, resource=workspace,
                                                   default=False))


async def require_instance(datasette: Any, request: Any) -> None:
    """Datasette's ``view-instance`` check (an instance-wide ``allow`` block applies here too).

    :raises datasette.Forbidden: the instance is closed to this actor.
    """
    await datasette.ensure_permissions(request.actor, ["view-instance"])


async def require_workspace(datasette: Any, request: Any) -> str:
    """The workspace of the URL, when the actor may see it.

    :raises NotFound: malformed id or no permission, worded exactly like a missing workspace.
    """
    await require_instance(datasette, request)
    workspace = request.url_vars["workspace"]
    if not WORKSPACE_RE.match(workspace) or not await can_view(datasette, request.actor, workspace):
        raise NotFound(f"no workspace {workspace!r}")
    return workspace
