-- 013: schema-change cleanup in two phases, erasure of a deleted card's content, and workspace
-- removal (issue 16, DESIGN §2, §6-7).
--
-- Idempotent (IF NOT EXISTS, CREATE OR REPLACE, repeated grants are no-ops), so it applies again
-- over its own objects.
SET LOCAL ROLE memarc_migrator;

-- 1. A schema-change run stays `cleanup_pending` until the point deletions of the cards it
--    deleted are done too. `cards_deleted_at`: when its card-deletion phase completed without
--    errors (NULL: only recorded, or a card could not be deleted); after that only the index
--    part can keep it open.
ALTER TABLE schema_change_runs ADD COLUMN IF NOT EXISTS cards_deleted_at timestamptz;

-- 2. Erasure: a deleted card's content must not outlive it. The proposals that carried it (the
--    one that created the card, updates of it, additions that would reuse it) keep their key,
--    kind, family, card ids and decisions, and lose their content (`proposal` is reduced to its
--    decisions, `digest` emptied, `erased_at` set); review receipts keep ids, counts and actions
--    and lose the card's title. Both happen in the deletion's transaction, as the runtime role.
ALTER TABLE session_proposals ADD COLUMN IF NOT EXISTS erased_at timestamptz;
GRANT UPDATE (proposal, digest, erased_at) ON session_proposals TO memarc_runtime;
GRANT UPDATE (result) ON review_receipts TO memarc_runtime;

-- 3. Workspace removal (`memarc workspace delete W`, migrator login): one row per removal, kept
--    after the workspace is gone (no foreign key, no `workspace_id` column: it belongs to no
--    workspace and no runtime role reads it). `deleted_rows`: the rows deleted, by table. The index
--    collection is dropped by a worker (the process that holds the index): `index_status` is
--    `pending` until it did, then `done`; `index_error` the last failure.
CREATE TABLE IF NOT EXISTS workspace_removals (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workspace     text NOT NULL CHECK (length(workspace) BETWEEN 1 AND 63),
    removed_by    text NOT NULL CHECK (length(removed_by) BETWEEN 1 AND 500),
    removed_at    timestamptz NOT NULL DEFAULT now(),
    deleted_rows  jsonb NOT NULL,
    index_status  text NOT NULL DEFAULT 'pending' CHECK (index_status IN ('pending', 'done')),
    index_done_at timestamptz,
    index_error   text
);
CREATE INDEX IF NOT EXISTS workspace_removals_pending_idx ON workspace_removals (workspace)
    WHERE index_status = 'pending';
-- Forced row-level security like every table, with rows for the owner only (the bootstrap
-- command and the definer functions below): no runtime or reader role sees a row.
ALTER TABLE workspace_removals ENABLE ROW LEVEL SECURITY;
ALTER TABLE workspace_removals FORCE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS owner_all ON workspace_removals;
CREATE POLICY owner_all ON workspace_removals TO memarc_migrator USING (true);

-- The worker's two look-ups, as definer functions (the runtime role has no grant on the table).
CREATE OR REPLACE FUNCTION workspace_removals_pending()
RETURNS TABLE (id bigint, workspace text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT id, workspace FROM workspace_removals WHERE index_status = 'pending' ORDER BY id
$$;

CREATE OR REPLACE FUNCTION workspace_removal_index_result(removal bigint, failure text)
RETURNS void
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    UPDATE workspace_removals
       SET index_status = CASE WHEN failure IS NULL THEN 'done' ELSE 'pending' END,
           index_done_at = CASE WHEN failure IS NULL THEN now() END,
           index_error = left(failure, 500)
     WHERE id = removal AND index_status = 'pending'
$$;

REVOKE ALL ON FUNCTION workspace_removals_pending(), workspace_removal_index_result(bigint, text)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION workspace_removals_pending(), workspace_removal_index_result(bigint, text)
    TO memarc_runtime;
