-- 005: projection format 2: the privacy filter (issue 8, DESIGN §4 and §8).
--
-- From format 2 on, the projected text and the payload's string values (scope, concepts,
-- dependency names) pass through shared/privacy.py before they are embedded or written to the
-- index: obvious secrets (passwords in connection strings and key=value pairs, API keys, bearer
-- tokens, JWTs, private keys) become [REDACTED:<kind>]. PostgreSQL keeps the original text.
--
-- Cards are not touched. Every format-1 projection is now incompatible: recall verification
-- drops format-1 hits, and the card shows as pending. So that the worker re-projects every card
-- without anyone running `retry` or `index`, an upsert operation at the card's current revision
-- is queued for every card that has no open upsert already; the worker's sweep picks them up
-- when it starts, and `pending` and `audit` show them until then.
SET LOCAL ROLE memarc_migrator;

INSERT INTO projection_formats (format, note) VALUES
    (2, 'format 1 with the privacy filter: secrets in the projected text and in the payload '
        'values scope, concepts and deps are replaced by [REDACTED:<kind>] (shared/privacy.py)');

-- Row-level security applies to the owner too (FORCE): walk the workspaces (visible to the
-- owner) and set each one as the transaction's workspace before reading its cards.
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
