-- 014: projection format 4: the card's own text as two more named vectors (issue 13, DESIGN §4-5).
--
-- From format 4 on, a point carries six named vectors (shared/projection/documents.py): format
-- 3's four (`dense`, `bm25` on the card's text with, for a clarification or a rule, the
-- questions of the solved cards that link to it; `key`, `key_bm25` on its key text) and `own`
-- (dense) and `own_bm25` (BM25) on the card's own text, without those linked questions. `rules`
-- mode searches the own text (a rule is found by its own words, not diluted by questions that
-- did not come through it); `solved` and `search` keep profiting from the linked questions
-- (bench/README.md, recall quality of format 4). The collection records its vector layout: a
-- format-3 collection (four vectors) is incompatible until `memarc index` rebuilds it.
--
-- Cards are not touched. As in 005 and 006, an upsert at the card's current revision is queued
-- for every card without an open upsert, so the worker re-projects every card (into a rebuilt
-- collection); older points are excluded from recall until then (their format is 3).
SET LOCAL ROLE memarc_migrator;

INSERT INTO projection_formats (format, note) VALUES
    (4, 'format 3 with two more named vectors (own, own_bm25) on the card''s own text, without '
        'the linked questions (shared/projection/documents.py)');

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
