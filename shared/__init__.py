"""Memory archive domain core.

Workspace-scoped knowledge cards kept in PostgreSQL (the single source of truth), projected into
Qdrant for hybrid search, and recalled only after verification against PostgreSQL. This package
imports no web framework: the Litestar writer, the arq worker, the CLI and the Datasette explorer
are thin adapters over it.
"""
