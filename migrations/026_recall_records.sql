-- 026: recall records (issue 35 part 1, docs/usage.md).
--
-- `recall_records` holds one row per recall that a person or an application asked (the HTTP
-- search, the CLI through it, the MCP recall tools, the explorer's recall page): who asked
-- (`actor`: `token:<id>`, `datasette:<actor>`), in which workflow session, the mode, `top`,
-- families and filters, the cards returned in rank order with their scores (`card_ids` and
-- `scores` side by side, rank = position), the hits verification dropped, and where the recall
-- spent its time (`timings`, milliseconds by stage, and `total`). The query is kept as the
-- privacy filter left it (`query_text`, NULL when MEMARC_RECALL_QUERY_TEXT=off) and always as
-- `query_digest` (`sha256:` of that text, normalised). Evaluation runs and the review page's
-- neighbours write none (shared/archive/recall_records.py).
--
-- A row is written after the answer is computed, in a transaction of its own without the
-- workspace lock; a row PostgreSQL refuses is counted as lost, and the recall still answers.
-- Every column is bounded (a recall returns at most 100 cards). The runtime role inserts only;
-- the reader role reads (the explorer's reports, later). Rows older than
-- MEMARC_RECALL_RETENTION_DAYS are deleted by the worker's sweep, in batches, through the
-- definer function below (the runtime role cannot delete them itself).
--
-- Written to apply again over its own objects (tests undo migrations down to 005).
SET LOCAL ROLE memarc_migrator;

CREATE TABLE IF NOT EXISTS recall_records (
    id           uuid PRIMARY KEY,
    workspace_id text NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    actor        text NOT NULL CHECK (length(actor) BETWEEN 1 AND 300),
    session_id   text CHECK (length(session_id) BETWEEN 1 AND 200),
    mode         text NOT NULL CHECK (mode IN ('search', 'rules', 'solved')),
    top          integer NOT NULL CHECK (top BETWEEN 1 AND 100),
    families     text[] CHECK (cardinality(families) <= 4),
    filters      jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (pg_column_size(filters) <= 65536),
    query_text   text CHECK (length(query_text) BETWEEN 1 AND 2000),
    query_digest text NOT NULL CHECK (query_digest ~ '^sha256:[0-9a-f]{64}$'),
    card_ids     uuid[] NOT NULL CHECK (cardinality(card_ids) <= 100),
    scores       double precision[] NOT NULL
                 CHECK (cardinality(scores) = cardinality(card_ids)),
    excluded     integer NOT NULL CHECK (excluded >= 0),
    timings      jsonb NOT NULL CHECK (pg_column_size(timings) <= 1024),
    created_at   timestamptz NOT NULL DEFAULT now()
);
-- the sweep's purge, across workspaces, oldest first
CREATE INDEX IF NOT EXISTS recall_records_created_idx ON recall_records (created_at);

ALTER TABLE recall_records ENABLE ROW LEVEL SECURITY;
ALTER TABLE recall_records FORCE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS workspace_isolation ON recall_records;
DROP POLICY IF EXISTS owner_all ON recall_records;
CREATE POLICY workspace_isolation ON recall_records
    USING (workspace_id = current_setting('memarc.workspace', true))
    WITH CHECK (workspace_id = current_setting('memarc.workspace', true));
CREATE POLICY owner_all ON recall_records TO memarc_migrator USING (true);
GRANT INSERT ON recall_records TO memarc_runtime;
GRANT SELECT ON recall_records TO memarc_reader;

-- Delete at most `batch` records older than `retention`, oldest first, in every workspace;
-- returns how many. The sweep calls it again while a batch comes back full.
CREATE OR REPLACE FUNCTION recall_records_purge(retention interval, batch integer)
RETURNS bigint
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    WITH gone AS (
        DELETE FROM recall_records WHERE id IN (
            SELECT id FROM recall_records WHERE created_at < now() - retention
            ORDER BY created_at LIMIT batch)
        RETURNING 1
    )
    SELECT count(*) FROM gone
$$;
REVOKE ALL ON FUNCTION recall_records_purge(interval, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION recall_records_purge(interval, integer) TO memarc_runtime;
