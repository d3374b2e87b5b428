"""The states of a workspace's index collection against the one PostgreSQL records (issue 25,
:func:`shared.projection.recovery.assess`)."""

from __future__ import annotations

import pytest

from shared.projection.recovery import ADOPT, FRESH, LOST, OK, REBUILDING, assess


@pytest.mark.parametrize(("recorded", "found", "projected", "state"), [
    ({"collection": "m_acme__1a2b3c4d"}, "m_acme__1a2b3c4d", True, OK),
    # the recorded collection is gone, or a fresh one stands in its place (one new card's)
    ({"collection": "m_acme__1a2b3c4d"}, None, True, LOST),
    ({"collection": "m_acme__1a2b3c4d"}, "m_acme__99999999", True, LOST),
    # noticed already: a rebuild is queued or running, whatever the engine has meanwhile
    ({"collection": None}, None, False, REBUILDING),
    ({"collection": None}, "m_acme__99999999", False, REBUILDING),
    # nothing recorded: a new workspace, one made before migration 022, or one that lost it then
    (None, None, False, FRESH),
    (None, "m_acme__1a2b3c4d", True, ADOPT),
    (None, None, True, LOST),
], ids=["recorded", "missing", "replaced", "rebuilding", "rebuilding-other", "fresh", "adopt",
        "lost-unrecorded"])
def test_assess(recorded, found, projected, state):
    assert assess(recorded, found, projected) == state
