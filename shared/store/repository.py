"""Temporary: the old repository names that shared/workflow/* still calls until its split lands.

The repository was split into :mod:`shared.store.cards`, :mod:`~shared.store.outbox`,
:mod:`~shared.store.listing`, :mod:`~shared.store.activity_log`, :mod:`~shared.store.tokens`,
:mod:`~shared.store.workspaces`, :mod:`~shared.store.rebuilds` and
:mod:`~shared.store.verification`. Only the modules of ``NOT_YET_MOVED``
(``tests/test_store_queries.py``) may import this one; it is deleted when that set is emptied.
"""

from __future__ import annotations

from shared.store.activity_log import record as record_activity
from shared.store.cards import add_links, resolve_link_targets
from shared.store.cards import delete as delete_card
from shared.store.cards import get as get_card
from shared.store.cards import get_many as get_cards
from shared.store.cards import insert as insert_card
from shared.store.cards import update as update_card
from shared.store.outbox import insert as insert_op
from shared.store.outbox import projection_state
from shared.store.workspaces import get as workspace

__all__ = ["add_links", "delete_card", "get_card", "get_cards", "insert_card", "insert_op",
           "projection_state", "record_activity", "resolve_link_targets", "update_card",
           "workspace"]
