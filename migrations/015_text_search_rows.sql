-- 015: a list page with text search reads the matching cards once, and matches them without
-- ILIKE's per-row case folding (issue 14: the explorer's text search at or under Datasette's).
--
-- 1. The searchable text is stored lower-cased. PostgreSQL runs `s ILIKE p` in a multibyte
--    database as `lower(s) LIKE lower(p)`, folding every candidate row's text again on every
--    search (about 4 us a row here, three quarters of the search's time). `search_text` (008)
--    now holds lower(card_visible_text(...)) and the search is `search_text LIKE lower(p)`:
--    the same matches, the folding done once when a card is written. The column is rebuilt
--    (the table rewritten, as in 008) and its trigram index with it.
-- 2. card_text_match_rows returns, from the same search, the columns a list page filters,
--    sorts and counts by, so that the page, its total and its facets come from one statement
--    over the search's rows (shared/store/listing.py) instead of reading the matching cards
--    again by id in every statement (count, page, facets).
--
-- Both functions are owner functions, as in 004 (under row-level security the trigram index
-- could not serve the search), that filter by the transaction's workspace themselves; they
-- return nothing the runtime and reader roles could not read. Callers escape the pattern as an
-- ILIKE pattern (lower() leaves the escapes as they are). Idempotent: the column is dropped if
-- present and added again, the functions are replaced.
SET LOCAL ROLE memarc_migrator;

ALTER TABLE cards DROP COLUMN IF EXISTS search_text;  -- its trigram index goes with it
ALTER TABLE cards ADD COLUMN search_text text NOT NULL
    GENERATED ALWAYS AS (lower(card_visible_text(title, scope, concepts, content))) STORED;

CREATE OR REPLACE FUNCTION card_text_matches(pattern text)
RETURNS SETOF uuid
LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT ROWS 500 AS $$
    SELECT id FROM cards
    WHERE workspace_id = current_setting('memarc.workspace', true)
      AND search_text LIKE lower(pattern)
$$;

CREATE OR REPLACE FUNCTION card_text_match_rows(pattern text)
RETURNS TABLE (id uuid, family text, origin text, concepts text[], title text,
               created_at timestamptz, updated_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT ROWS 500 AS $$
    SELECT c.id, c.family, c.origin, c.concepts, c.title, c.created_at, c.updated_at
    FROM cards c
    WHERE c.workspace_id = current_setting('memarc.workspace', true)
      AND c.search_text LIKE lower(pattern)
$$;

REVOKE ALL ON FUNCTION card_text_match_rows(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION card_text_match_rows(text) TO memarc_runtime, memarc_reader;

-- the trigram index on the rebuilt column (where pg_trgm is installed, as in 008)
DO $$
DECLARE
    ddl text;
BEGIN
    SELECT format('CREATE INDEX cards_search_text_trgm_idx ON cards '
                  'USING gin (search_text %s.gin_trgm_ops)', extnamespace::regnamespace)
    INTO ddl FROM pg_extension WHERE extname = 'pg_trgm';
    IF ddl IS NOT NULL THEN
        EXECUTE ddl;
    END IF;
END
$$;
