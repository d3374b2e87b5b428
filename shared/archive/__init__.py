"""The archive's use cases: card administration (``cards``), activity records (``activity``),
authentication, browsing for the explorer, the session workflow (``sessions``) and the
physical schema-change cleanup (``schema_changes``)."""
