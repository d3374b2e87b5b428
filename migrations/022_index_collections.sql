-- 022: the collection that holds a workspace's valid projections (issue 25, DESIGN §4).
--
-- A recorded projection (`projections`) says a card's point is in the index; it does not say in
-- which collection. When the engine's files were lost (a shard removed while the archive was
-- stopped, or under it), the first new card made a fresh, empty collection and recall then
-- answered from it as if it were complete. Now the physical collection that holds the valid
-- projections is recorded here: a name with a random suffix (`<prefix><workspace>__<8 hex>`)
-- that the engine never recreates by accident. It is written when a projection job creates the
-- workspace's first collection, when an index rebuild switches to a new one, and when a
-- collection made before this migration is adopted. A workspace whose index has no collection
-- by this name is `index_unavailable` for recall until the worker has rebuilt it
-- (shared/projection/recovery.py).
SET LOCAL ROLE memarc_migrator;

CREATE TABLE IF NOT EXISTS index_collections (
    workspace_id text PRIMARY KEY REFERENCES workspaces (id) ON DELETE CASCADE,
    collection   text,  -- NULL: the recorded one was lost; a rebuild is under way
    recorded_at  timestamptz NOT NULL DEFAULT now()
);

ALTER TABLE index_collections ENABLE ROW LEVEL SECURITY;
ALTER TABLE index_collections FORCE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS workspace_isolation ON index_collections;
CREATE POLICY workspace_isolation ON index_collections
    USING (workspace_id = current_setting('memarc.workspace', true))
    WITH CHECK (workspace_id = current_setting('memarc.workspace', true));
DROP POLICY IF EXISTS owner_all ON index_collections;
CREATE POLICY owner_all ON index_collections TO memarc_migrator USING (true);
GRANT SELECT, INSERT, UPDATE ON index_collections TO memarc_runtime;
GRANT SELECT ON index_collections TO memarc_reader;
