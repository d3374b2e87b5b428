"""The workflow's pure domain (DESIGN §6, §7): ``requests`` (wire structs) and ``rules`` (pure rules).

The use cases over them are :mod:`shared.archive.sessions` and :mod:`shared.archive.schema_changes`.
"""
