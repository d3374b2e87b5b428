-- 011: import keys, for an idempotent import and an export that round-trips (issue 15).
--
-- A card created by an import remembers the key of its line in `import_key`. A card's key is its
-- import key, or, for a card that has none (created through the API or a review), its id
-- `mem-<uuid>`: card_key() below. `memarc export` writes every card under its key (and its
-- links by their targets' keys), and `memarc import` takes a line whose key is already a card's
-- key in the workspace as that card (skipped, or updated in place with --on-conflict update)
-- instead of creating another one. So importing the same file twice changes nothing, and an
-- export imported into another workspace exports again under the same keys.
--
-- The unique index makes a key name one card per workspace (row-level security applies to the
-- column as to the rest of the row) and serves the import's look-up by key and the export's
-- order (by key, byte order, so that two workspaces export in one order).
--
-- Cards imported before this version have no import key (their keys were never stored). The
-- import adopts them instead: a line whose key is no card's key, and which says exactly what such
-- a card holds (family, title, content, scope, concepts, dependencies and source), is that card,
-- and gives it its key (nothing else of the card changes). The partial index finds the cards
-- still waiting for a key; once adopted, they leave it.
-- Idempotent (IF NOT EXISTS, CREATE OR REPLACE): it may run again over its own objects.
SET LOCAL ROLE memarc_migrator;

ALTER TABLE cards ADD COLUMN IF NOT EXISTS import_key text
    CHECK (import_key IS NULL OR length(import_key) BETWEEN 1 AND 200);

-- The key of a card: its import key, else its id as the API spells it.
CREATE OR REPLACE FUNCTION card_key(import_key text, id uuid) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(import_key, 'mem-' || id::text)
$$;
REVOKE ALL ON FUNCTION card_key(text, uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION card_key(text, uuid) TO memarc_runtime, memarc_reader;

CREATE UNIQUE INDEX IF NOT EXISTS cards_key_idx
    ON cards (workspace_id, (card_key(import_key, id)) COLLATE "C");

CREATE INDEX IF NOT EXISTS cards_unkeyed_import_idx ON cards (workspace_id)
    WHERE import_key IS NULL AND origin = 'import';
