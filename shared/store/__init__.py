"""The store: PostgreSQL, the single source of truth. The pool and workspace transactions, the
named queries, the migrations runner, bootstrap, and every read and write of the archive tables."""
