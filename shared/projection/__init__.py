"""Projection: from the outbox to the index, its queue and worker jobs, rebuild, and the audit.

Projecting operations from current state, the arq queue and jobs, the tracked rebuild, and the
reconciliation audit of the index against PostgreSQL.
"""
