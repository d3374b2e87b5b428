-- 027: feedback on recalls, and reading the recall records (issue 35 parts 2 and 3,
-- docs/usage.md).
--
-- `recall_feedback` holds one verdict per recall, card and principal: `helpful`, `not_helpful`
-- or `wrong`, with an optional note (through the privacy filter), given through the API, MCP,
-- the explorer's recall page or the administration (`via`), or recorded by a review that
-- applied a session's proposals (`via = 'review'`, `helpful`, for the existing cards the
-- applied proposals link to, on the session's latest recall that returned each). A principal
-- that gives feedback again on the same recall and card replaces its verdict (`updated_at`).
-- Feedback is on a card the recall returned, in the recall's workspace
-- (shared/archive/feedback.py checks both); it goes with its recall when the sweep purges the
-- record past the retention, and with its card when the card is deleted.
--
-- The runtime role now reads the recall records too (row-level security keeps it in its
-- workspace): feedback is checked against the record, and the curation reports
-- (shared/archive/reports.py) count recalls per card.
--
-- Written to apply again over its own objects (tests undo migrations down to 005).
SET LOCAL ROLE memarc_migrator;

CREATE TABLE IF NOT EXISTS recall_feedback (
    workspace_id text NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    recall_id    uuid NOT NULL REFERENCES recall_records (id) ON DELETE CASCADE,
    card_id      uuid NOT NULL,
    actor        text NOT NULL CHECK (length(actor) BETWEEN 1 AND 300),
    verdict      text NOT NULL CHECK (verdict IN ('helpful', 'not_helpful', 'wrong')),
    note         text CHECK (length(note) BETWEEN 1 AND 2000),
    via          text NOT NULL CHECK (via IN ('api', 'mcp', 'explorer', 'admin', 'review')),
    review_id    text CHECK (length(review_id) BETWEEN 1 AND 200),
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (recall_id, card_id, actor),
    FOREIGN KEY (workspace_id, card_id) REFERENCES cards (workspace_id, id) ON DELETE CASCADE
);
-- a card's feedback, newest first (its page; the unhelpful report)
CREATE INDEX IF NOT EXISTS recall_feedback_card_idx
    ON recall_feedback (workspace_id, card_id, updated_at DESC);

ALTER TABLE recall_feedback ENABLE ROW LEVEL SECURITY;
ALTER TABLE recall_feedback FORCE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS workspace_isolation ON recall_feedback;
DROP POLICY IF EXISTS owner_all ON recall_feedback;
CREATE POLICY workspace_isolation ON recall_feedback
    USING (workspace_id = current_setting('memarc.workspace', true))
    WITH CHECK (workspace_id = current_setting('memarc.workspace', true));
CREATE POLICY owner_all ON recall_feedback TO memarc_migrator USING (true);
GRANT SELECT, INSERT, UPDATE ON recall_feedback TO memarc_runtime;
GRANT SELECT ON recall_feedback TO memarc_reader;

-- the recall records of a workspace, newest first (the reports, the recalls page), and of a
-- workflow session (a review's implicit feedback)
CREATE INDEX IF NOT EXISTS recall_records_recent_idx
    ON recall_records (workspace_id, created_at DESC);
CREATE INDEX IF NOT EXISTS recall_records_session_idx
    ON recall_records (workspace_id, session_id, created_at DESC) WHERE session_id IS NOT NULL;
GRANT SELECT ON recall_records TO memarc_runtime;
