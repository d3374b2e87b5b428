-- 008: the list's text search searches the card's visible text (issue 14).
--
-- Until now `q` (API list, CLI list, explorer list; one definition, card_text_matches of 004)
-- matched `title ILIKE p OR content::text ILIKE p`: the content's JSON text, so `rule` matched
-- every SQL rule (the key "rule"), `definition` every clarification, and a quote or a line break
-- in the content could never be found (the JSON escapes them as \" and \n), while scope and
-- concepts were not searched at all.
--
-- Now a card's searchable text is what a reader sees of it: its title, scope, concepts and the
-- values of its content fields (the SQL of a solved question or an explained error is a content
-- value), keys left out. card_visible_text() builds it, and the stored generated column
-- `search_text` keeps it with the row, so that text search reads (and a trigram index covers)
-- one column. Fields are joined by U+001F (the ASCII unit separator), which no field is meant to
-- contain, so a search term never spans two fields unless it contains that character itself.
SET LOCAL ROLE memarc_migrator;

-- Title, scope, concepts (in their order) and the content's values (by key), joined by U+001F;
-- an absent scope and an empty concept list are left out. Content values are strings (the
-- writer refuses anything else).
CREATE FUNCTION card_visible_text(title text, scope text, concepts text[], content jsonb)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT concat_ws(chr(31), title, scope,
                     nullif(array_to_string(concepts, chr(31)), ''),
                     (SELECT string_agg(value, chr(31) ORDER BY key) FROM jsonb_each_text(content)))
$$;
REVOKE ALL ON FUNCTION card_visible_text(text, text, text[], jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION card_visible_text(text, text, text[], jsonb)
    TO memarc_runtime, memarc_reader;

ALTER TABLE cards ADD COLUMN search_text text NOT NULL
    GENERATED ALWAYS AS (card_visible_text(title, scope, concepts, content)) STORED;

-- The text search, as in 004 (an owner function, so that under row-level security the trigram
-- index can serve it), on the visible text. Callers escape the ILIKE pattern.
CREATE OR REPLACE FUNCTION card_text_matches(pattern text)
RETURNS SETOF uuid
LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT ROWS 500 AS $$
    SELECT id FROM cards
    WHERE workspace_id = current_setting('memarc.workspace', true)
      AND search_text ILIKE pattern
$$;

-- 004's trigram indexes served the old condition only; one index on the visible text replaces
-- them (where pg_trgm is installed; otherwise the search scans the column, as before).
DROP INDEX IF EXISTS cards_title_trgm_idx;
DROP INDEX IF EXISTS cards_content_trgm_idx;
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
