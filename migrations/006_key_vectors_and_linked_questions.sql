-- 006: projection format 3: key-text vectors and linked questions (issue 13, DESIGN §4-5).
--
-- From format 3 on, a point carries four named vectors (shared/projection/documents.py): `key`
-- and `key_bm25` on the card's key text (a solved question's question, a clarification's term
-- and definition, a rule, an error), `dense` and `bm25` on the card's text, where a
-- clarification's or a rule's text also holds the questions of the solved questions that link
-- to it. The collection records the vector layout and a fingerprint of the models; a collection
-- of format 2 (two vectors, no fingerprint) is incompatible: `memarc index` rebuilds it.
--
-- Cards are not touched. As in 005, an upsert at the card's current revision is queued for every
-- card without an open upsert, so the worker re-projects every card (into a rebuilt collection).
--
-- The linked questions make a clarification's projection depend on other cards: the triggers
-- below queue its re-projection, in the same transaction, whenever a link into it is added or
-- removed (a solved card created, edited, imported, reviewed or deleted) or the question of a
-- solved card linking to it changes. One pending upsert per card is enough: none is added where
-- one is pending already.
SET LOCAL ROLE memarc_migrator;

INSERT INTO projection_formats (format, note) VALUES
    (3, 'format 2 with four named vectors (dense, key, bm25, key_bm25) and, for clarifications '
        'and rules, the questions of the linking solved questions in dense and bm25 '
        '(shared/projection/documents.py)');

DO $$
DECLARE
    ws text;
BEGIN
    FOR ws IN SELECT id FROM workspaces ORDER BY id LOOP
        PERFORM set_config('memarc.workspace', ws, true);
        INSERT INTO projection_ops (workspace_id, card_id, op, revision)
        SELECT c.workspace_id, c.id, 'upsert', c.revision
        FROM cards c
        WHERE NOT EXISTS (SELECT 1 FROM projection_ops o
                          WHERE o.card_id = c.id AND o.op = 'upsert'
                            AND o.status IN ('pending', 'running'))
        ORDER BY c.id;
    END LOOP;
    PERFORM set_config('memarc.workspace', '', true);
END
$$;

-- Queue an upsert at the current revision for each expanded card (clarification or rule) among
-- `targets` that has no pending upsert. Runs as the caller (the runtime role, under RLS).
CREATE FUNCTION requeue_expanded_cards(targets uuid[]) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO projection_ops (workspace_id, card_id, op, revision)
    SELECT c.workspace_id, c.id, 'upsert', c.revision
    FROM cards c
    WHERE c.id = ANY(targets)
      AND c.family IN ('domain_clarification', 'sql_rule')
      AND NOT EXISTS (SELECT 1 FROM projection_ops o
                      WHERE o.card_id = c.id AND o.op = 'upsert' AND o.status = 'pending')
    ORDER BY c.id
$$;

CREATE FUNCTION card_links_requeue_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM requeue_expanded_cards(ARRAY(
        SELECT DISTINCT n.target_id FROM inserted_links n
        JOIN cards s ON s.id = n.source_id WHERE s.family = 'solved_question'));
    RETURN NULL;
END
$$;

-- A deleted link's source may be gone already (a cascade from its card): its targets are queued
-- whatever the source was.
CREATE FUNCTION card_links_requeue_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM requeue_expanded_cards(ARRAY(SELECT DISTINCT o.target_id FROM deleted_links o));
    RETURN NULL;
END
$$;

CREATE FUNCTION cards_requeue_question_targets() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM requeue_expanded_cards(ARRAY(
        SELECT l.target_id FROM card_links l WHERE l.source_id = NEW.id));
    RETURN NULL;
END
$$;

CREATE TRIGGER card_links_inserted_requeue AFTER INSERT ON card_links
    REFERENCING NEW TABLE AS inserted_links
    FOR EACH STATEMENT EXECUTE FUNCTION card_links_requeue_inserted();

CREATE TRIGGER card_links_deleted_requeue AFTER DELETE ON card_links
    REFERENCING OLD TABLE AS deleted_links
    FOR EACH STATEMENT EXECUTE FUNCTION card_links_requeue_deleted();

CREATE TRIGGER cards_question_requeue AFTER UPDATE ON cards
    FOR EACH ROW
    WHEN (NEW.family = 'solved_question'
          AND OLD.content->>'question' IS DISTINCT FROM NEW.content->>'question')
    EXECUTE FUNCTION cards_requeue_question_targets();

REVOKE ALL ON FUNCTION requeue_expanded_cards(uuid[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION requeue_expanded_cards(uuid[]) TO memarc_runtime;
