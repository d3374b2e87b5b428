"""The workflow (DESIGN §6, §7): proposals, review with receipts, schema-change cleanup.

``requests`` (wire structs), ``rules`` (pure rules), ``sessions`` (the use cases, ``Workflow``),
``schema_changes`` (physical schema-change cleanup); their SQL is in ``shared.store.workflow`` and
``shared.store.schema_changes``.
"""
