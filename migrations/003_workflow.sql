-- 003: workflow integration (DESIGN §6, §7): session proposals, review receipts and physical
-- schema-change runs, each isolated by workspace under forced row-level security like 001.
--
-- Roles exist since 001; everything below is created as, and owned by, the migrator role.
SET LOCAL ROLE memarc_migrator;

-- Normalised card content, for "an exact existing card is reused, not duplicated" (DESIGN §6):
-- every content field with whitespace runs collapsed to one space, trimmed and lower-cased;
-- empty fields dropped. Computed by the same function for stored cards and for proposals, so
-- both sides of a comparison are always normalised identically.
CREATE FUNCTION normalized_content(content jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(jsonb_object_agg(e.key, e.norm), '{}'::jsonb)
    FROM (SELECT key, lower(btrim(regexp_replace(value, '\s+', ' ', 'g'))) AS norm
          FROM jsonb_each_text(content)) e
    WHERE e.norm <> ''
$$;
REVOKE ALL ON FUNCTION normalized_content(jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION normalized_content(jsonb) TO memarc_runtime, memarc_reader;

-- A session's proposals (additions and updates), keyed within the session by the caller's local
-- key. `card_id` has no foreign key: the proposal outlives a card deleted since (it then shows as
-- stale). `proposal` holds the validated proposal as stored; `digest` makes a repeated identical
-- propose a no-op.
CREATE TABLE session_proposals (
    seq           bigint GENERATED ALWAYS AS IDENTITY,
    workspace_id  text NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    session_id    text NOT NULL CHECK (length(session_id) BETWEEN 1 AND 200),
    key           text NOT NULL CHECK (length(key) BETWEEN 1 AND 100),
    kind          text NOT NULL CHECK (kind IN ('addition', 'update')),
    family        text NOT NULL CHECK (family IN ('domain_clarification', 'sql_rule',
                                                  'solved_question', 'explained_error')),
    card_id       uuid,
    base_revision integer CHECK (base_revision IS NULL OR base_revision >= 1),
    reuse_card_id uuid,
    proposal      jsonb NOT NULL,
    digest        text NOT NULL,
    proposed_by   text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, session_id, key),
    CHECK ((kind = 'update') = (card_id IS NOT NULL)),
    CHECK ((kind = 'update') = (base_revision IS NOT NULL)),
    CHECK (kind = 'addition' OR reuse_card_id IS NULL)
);
CREATE INDEX session_proposals_order_idx ON session_proposals (workspace_id, session_id, seq);

-- The durable receipt of a review: written in the same transaction as the cards it created or
-- updated. One review per session; the review id is the idempotency key (a repeated delivery
-- returns `result` and writes nothing).
CREATE TABLE review_receipts (
    workspace_id   text NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    review_id      text NOT NULL CHECK (length(review_id) BETWEEN 1 AND 200),
    session_id     text NOT NULL CHECK (length(session_id) BETWEEN 1 AND 200),
    outcome        text NOT NULL CHECK (outcome IN ('applied', 'declined')),
    request_digest text NOT NULL,
    result         jsonb NOT NULL,
    reviewed_by    text NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, review_id),
    UNIQUE (workspace_id, session_id)
);

-- Physical schema-change cleanup runs: recorded first with a pending cleanup phase, completed
-- by the deletion (or by a repeated request with the same run id after a crash). `deleted` and
-- `errors` are the deletion receipt. At most one incomplete run per database/schema.
CREATE TABLE schema_change_runs (
    workspace_id    text NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    run_id          text NOT NULL CHECK (length(run_id) BETWEEN 1 AND 200),
    database_name   text NOT NULL CHECK (length(database_name) BETWEEN 1 AND 200),
    schema_name     text NOT NULL CHECK (length(schema_name) BETWEEN 1 AND 200),
    removed_tables  text[] NOT NULL DEFAULT '{}',
    removed_columns jsonb NOT NULL DEFAULT '[]'::jsonb,
    request_digest  text NOT NULL,
    status          text NOT NULL DEFAULT 'cleanup_pending'
                    CHECK (status IN ('cleanup_pending', 'done')),
    deleted         jsonb NOT NULL DEFAULT '[]'::jsonb,
    errors          jsonb NOT NULL DEFAULT '[]'::jsonb,
    requested_by    text NOT NULL,
    recorded_at     timestamptz NOT NULL DEFAULT now(),
    completed_at    timestamptz,
    PRIMARY KEY (workspace_id, run_id)
);
CREATE UNIQUE INDEX schema_change_runs_one_open
    ON schema_change_runs (workspace_id, database_name, schema_name)
    WHERE status = 'cleanup_pending';

DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['session_proposals', 'review_receipts', 'schema_change_runs'] LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format(
            'CREATE POLICY workspace_isolation ON %I USING (workspace_id = current_setting(''memarc.workspace'', true)) '
            'WITH CHECK (workspace_id = current_setting(''memarc.workspace'', true))', t);
    END LOOP;
END
$$;

-- Runtime: the DML each table needs (receipts and proposals are append-only: a receipt is never
-- rewritten). Reader: SELECT only.
GRANT SELECT, INSERT ON session_proposals, review_receipts TO memarc_runtime;
GRANT SELECT, INSERT, UPDATE ON schema_change_runs TO memarc_runtime;
GRANT SELECT ON session_proposals, review_receipts, schema_change_runs TO memarc_reader;
