"""Workflow: session proposals, the reviewable summary, reviewed promotion with receipts, and
physical schema-change cleanup."""
