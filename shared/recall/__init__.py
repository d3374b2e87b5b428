"""Verified recall: hybrid search, verification in PostgreSQL, link expansion, ranking."""
