-- 009: a card's activity, newest first, by index (issue 16).
--
-- The worker records a projection that did not happen (privacy_refused, index_incompatible) only
-- when the card's newest record does not already say the same (query
-- activity_insert_projection_outcomes); that look-up, and the activity list filtered by card
-- (`GET .../activity?card_id=`), read one card's records newest first. Without this index both
-- walk the workspace's whole log from its newest record (activity_recent_idx), once per card of
-- a failed batch.
SET LOCAL ROLE memarc_migrator;

CREATE INDEX activity_card_recent_idx ON activity (workspace_id, card_id, at DESC, id DESC)
    WHERE card_id IS NOT NULL;
