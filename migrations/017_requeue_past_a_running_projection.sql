-- A re-projection queued by migration 006's triggers (a linking solved card's question changed,
-- a link came or went) asks for the target's current revision, so a projection of that same
-- revision already in flight would mark it done (its `ops_supersede` completes open upserts at
-- or below the revision it wrote) although it read the old linked questions: the clarification
-- or rule then kept a stale expanded text with nothing left to fix it. Now a projection job
-- notes each open upsert of its cards with its `updated_at` before it reads them and completes
-- only those still unchanged (`shared/projection/project.py`), and the trigger no longer lets a
-- pending upsert carry its change silently: it stamps it (`updated_at = clock_timestamp()`), so
-- a job that read the card before the change leaves it pending for the next one. No lock is
-- held longer than a writer's own transaction.
CREATE OR REPLACE FUNCTION requeue_expanded_cards(targets uuid[]) RETURNS void
LANGUAGE sql AS $$
    WITH expanded AS (
        SELECT c.workspace_id, c.id, c.revision FROM cards c
        WHERE c.id = ANY(targets) AND c.family IN ('domain_clarification', 'sql_rule')
    ), stamped AS (
        UPDATE projection_ops o SET updated_at = clock_timestamp()
        FROM expanded e
        WHERE o.card_id = e.id AND o.op = 'upsert' AND o.status = 'pending'
        RETURNING o.card_id
    )
    INSERT INTO projection_ops (workspace_id, card_id, op, revision)
    SELECT e.workspace_id, e.id, 'upsert', e.revision FROM expanded e
    WHERE e.id NOT IN (SELECT card_id FROM stamped)
    ORDER BY e.id
$$;
ALTER FUNCTION requeue_expanded_cards(uuid[]) SET search_path FROM CURRENT;
