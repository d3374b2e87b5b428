-- A re-projection queued by migration 006's triggers (a linking solved card's question changed,
-- a link came or went) asks for the target's current revision, so a projection of that same
-- revision already in flight would mark it done (its `ops_supersede` completes open upserts at
-- or below the revision it wrote) although it read the old linked questions: the clarification
-- or rule then kept a stale expanded text with nothing left to fix it. Two halves close that:
-- a projection job now locks (FOR UPDATE) the open upserts of its cards before it reads them and
-- completes only those (`shared/projection/project.py`), and the trigger no longer counts a
-- pending upsert that such a job holds (SKIP LOCKED) as carrying its change: it queues a new
-- one, which the job in flight leaves pending. A pending upsert the trigger does count is
-- locked by it until the writing transaction ends, so a job reads the change or waits for it.
CREATE OR REPLACE FUNCTION requeue_expanded_cards(targets uuid[]) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO projection_ops (workspace_id, card_id, op, revision)
    SELECT c.workspace_id, c.id, 'upsert', c.revision
    FROM cards c
    WHERE c.id = ANY(targets)
      AND c.family IN ('domain_clarification', 'sql_rule')
      AND NOT EXISTS (SELECT 1 FROM projection_ops o
                      WHERE o.card_id = c.id AND o.op = 'upsert' AND o.status = 'pending'
                      FOR UPDATE SKIP LOCKED)
    ORDER BY c.id
$$;
ALTER FUNCTION requeue_expanded_cards(uuid[]) SET search_path FROM CURRENT;
