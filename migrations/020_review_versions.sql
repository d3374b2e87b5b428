-- 020: a review bound to the summary it was made on (issue 25, case 6).
--
-- A review names the version of the summary it was made on; the proposals stored after that
-- version stay open (neither applied nor declined) and are reviewed later, by another review of
-- the same session. So a session can hold several receipts: the one-receipt-per-session rule
-- goes (the review id stays the idempotency key, the primary key). A receipt records the last
-- proposal it covers (`result ->> 'through'`, a `seq` of session_proposals); a receipt written
-- before this migration has none and covers the whole session, as it did.
--
-- Idempotent (IF EXISTS / IF NOT EXISTS), like 013.
SET LOCAL ROLE memarc_migrator;

ALTER TABLE review_receipts DROP CONSTRAINT IF EXISTS review_receipts_workspace_id_session_id_key;
CREATE INDEX IF NOT EXISTS review_receipts_session_idx
    ON review_receipts (workspace_id, session_id, created_at);
