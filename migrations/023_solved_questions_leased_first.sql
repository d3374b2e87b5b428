-- 023: solved questions are projected first (issue 26: the quick start's first query answers
-- as early as possible).
--
-- Operations used to be leased in id order. An import queues its links' targets (clarifications,
-- rules: migration 006's triggers) before its own upserts, and those in card-id order, so the
-- solved questions a first `solved` recall needs were spread over the whole projection of a
-- fresh import (about two minutes for the 2,251 demo cards on 2 cores).
--
-- Each operation now has a lease order, `lease_order`: the time it was queued (`created_at`),
-- less a head start of 10 minutes for an upsert of a solved question (none for anything else;
-- projection_head_start below). Workers lease by (lease_order, id) (outbox_claim), so:
--   - the solved questions queued by one import or review go before every other family's
--     operation queued with them or before them (up to 10 minutes before);
--   - fairness is bounded: an operation is overtaken only by solved-question upserts queued
--     less than 10 minutes after it, so a steady stream of solved questions delays the other
--     families by at most that (plus the queue ahead of them), never forever;
--   - within one lease order (one transaction, one kind) the order is still the id order.
-- Nothing else relies on the lease order: a job projects each card's current state under the
-- card's lock whatever operation led to it, completes only the upserts it read before the card
-- (migration 017), and a coalesced upsert (outbox_upsert_coalesced, outbox_insert_bulk, 017's
-- trigger) keeps its place. A retried or reclaimed (expired lease) operation keeps its order,
-- as it kept its id.
--
-- The lease order is set by a trigger on insert, so every writer gets it (the queries of
-- shared/store/queries.sql, 006's and 017's trigger functions, later migrations). The claim and
-- the sweep read the new partial index in its order and stop at their limit, instead of sorting
-- every open operation of the workspace at each lease (a bitmap scan and an external sort of
-- 90,000 rows, 80 ms, with 100,000 open operations).
SET LOCAL ROLE memarc_migrator;

-- The head start of an operation's lease order: 10 minutes for an upsert of a solved question.
CREATE FUNCTION projection_head_start(op text, family text) RETURNS interval
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN op = 'upsert' AND family = 'solved_question'
                THEN interval '10 minutes' ELSE interval '0' END
$$;
REVOKE ALL ON FUNCTION projection_head_start(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION projection_head_start(text, text) TO memarc_migrator, memarc_runtime;

-- NOT NULL with a constant default: no table rewrite. The done operations keep that value
-- (they are never leased again: no statement reopens a done operation); the open ones get theirs.
ALTER TABLE projection_ops ADD COLUMN lease_order timestamptz NOT NULL DEFAULT '-infinity';
ALTER TABLE projection_ops ALTER COLUMN lease_order DROP DEFAULT;

UPDATE projection_ops o
SET lease_order = o.created_at - projection_head_start(
    o.op, (SELECT c.family FROM cards c WHERE c.id = o.card_id))
WHERE o.status <> 'done';

-- Runs as the writer (the runtime role under row-level security: the card is its workspace's).
CREATE FUNCTION projection_ops_set_lease_order() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.lease_order := NEW.created_at - projection_head_start(
        NEW.op, (SELECT c.family FROM cards c WHERE c.id = NEW.card_id));
    RETURN NEW;
END
$$;
ALTER FUNCTION projection_ops_set_lease_order() SET search_path FROM CURRENT;

CREATE TRIGGER projection_ops_lease_order BEFORE INSERT ON projection_ops
    FOR EACH ROW EXECUTE FUNCTION projection_ops_set_lease_order();

-- The claim's and the sweep's order (outbox_claim, outbox_open_for_sweep).
CREATE INDEX projection_ops_lease_idx ON projection_ops (workspace_id, lease_order, id)
    WHERE status <> 'done';
