-- 004: the card list at scale (issue 5, DESIGN §10): text search that can use an index, indexes
-- matching the list's sort orders (ties by id) and the dependency facets.
--
-- Measured with bench/explorer_latency.py (50,000 cards); see bench/README.md.
--
-- Why text search goes through a function: under row-level security PostgreSQL evaluates the
-- policy's condition before any condition whose operator is not LEAKPROOF, and such a condition
-- can then never be an index condition. ILIKE (texticlike) and array containment (@>) are not
-- leakproof, so for the runtime and reader roles every text search scanned every card of the
-- workspace (and did so once per statement of a list page: count, page, and each facet). The
-- owner function below runs as the migrator role, for which a permissive `owner_all` policy makes
-- the table unrestricted (as 001 does for workspaces, tokens and operations), and filters by the
-- transaction's workspace itself, exactly as the workspace policy does.

-- pg_trgm is a trusted extension (PostgreSQL 13+): the database owner may create it. Where it is
-- not installed (the embedded `pgserver` build ships none) or not allowed, text search still
-- works, by scanning; create the extension and the two indexes below by hand to speed it up.
DO $$
BEGIN
    CREATE EXTENSION IF NOT EXISTS pg_trgm;
EXCEPTION WHEN OTHERS THEN
    RAISE NOTICE 'pg_trgm is not available (%): the card list''s text search will scan the cards',
        SQLERRM;
END
$$;

-- Trigram indexes for `ILIKE '%…%'` on the title and the content's text, with the operator class
-- of wherever the extension lives (this schema, or another one where it was installed before).
DO $$
DECLARE
    ext_schema text;
BEGIN
    SELECT n.nspname INTO ext_schema
    FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
    WHERE e.extname = 'pg_trgm';
    IF ext_schema IS NOT NULL THEN
        EXECUTE format('CREATE INDEX cards_title_trgm_idx ON cards USING gin (title %I.gin_trgm_ops)',
                       ext_schema);
        EXECUTE format('CREATE INDEX cards_content_trgm_idx ON cards '
                       'USING gin ((content::text) %I.gin_trgm_ops)', ext_schema);
    END IF;
END
$$;

SET LOCAL ROLE memarc_migrator;

-- Sorts: "updated" / "created" are newest first with ties by id descending, "title" and
-- "family" A-Z with ties by id ascending; each index serves its order in both directions.
-- 001's cards_list_idx (updated_at DESC, id ASC) matched neither direction once ties break by id.
DROP INDEX cards_list_idx;
CREATE INDEX cards_updated_idx ON cards (workspace_id, updated_at, id);
CREATE INDEX cards_created_idx ON cards (workspace_id, created_at, id);
CREATE INDEX cards_title_idx ON cards (workspace_id, lower(title), id);
DROP INDEX cards_family_idx;
CREATE INDEX cards_family_idx ON cards (workspace_id, family, id);
CREATE INDEX cards_origin_idx ON cards (workspace_id, origin);

-- Dependency filters and facets: by database (and table within it), with the card id in the index
-- so the facet counts read the index alone.
CREATE INDEX card_dependencies_facet_idx
    ON card_dependencies (workspace_id, database_name, table_name, card_id);

-- Text search: the ids of the transaction's workspace whose title or content (as JSON text)
-- matches an ILIKE pattern. Callers escape the pattern; RLS-equivalent by its own filter.
CREATE POLICY owner_all ON cards TO memarc_migrator USING (true);

CREATE FUNCTION card_text_matches(pattern text)
RETURNS SETOF uuid
LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT ROWS 500 AS $$
    SELECT id FROM cards
    WHERE workspace_id = current_setting('memarc.workspace', true)
      AND (title ILIKE pattern OR content::text ILIKE pattern)
$$;

REVOKE ALL ON FUNCTION card_text_matches(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION card_text_matches(text) TO memarc_runtime, memarc_reader;
