"""The store: PostgreSQL, the single source of truth, and the only layer that runs SQL.

``database.py`` (pool, workspace transactions, the named-query loader ``Q`` over
``queries.sql``), ``migrations.py``, ``bootstrap.py`` (migrator credentials), and the reads and
writes of the runtime by what they hold: ``workspaces.py``, ``cards.py`` (cards, dependencies,
links), ``listing.py`` (the list query, facets, text search), ``outbox.py`` (projection
operations, recorded projections, projection locks), ``rebuilds.py`` (tracked index rebuilds),
``verification.py`` (recall's verification rows), ``activity.py`` (the activity log),
``authentication.py`` (authentication's token look-up), ``sessions.py`` (the session workflow),
``schema_changes.py`` (schema-change cleanup) and ``recall_records.py`` (the records of recalls).

Each module ``X.py`` runs the queries named ``X_...`` of the ``X`` section of ``queries.sql``; the
use case ``shared/archive/X.py``, where there is one, keeps its SQL there.
"""
