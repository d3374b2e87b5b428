"""Projection: from the outbox to the index (projecting operations, the queue, the arq jobs,
rebuild, and the reconciliation audit of the index against PostgreSQL)."""
