"""Projection: from the outbox to the index, its queue, rebuild, and the audit.

Projecting operations from current state, the arq queue, the tracked rebuild, and the
reconciliation audit of the index against PostgreSQL. The worker that runs them is
:mod:`shared.worker`.
"""
