-- 012: the cards decided in a workflow session (issue 16, DESIGN §5): which cards the user
-- accepted or rejected in a session, with the decision, who recorded it and when. Recall in that
-- session (`session` of POST .../search) excludes them and never bridges through them.
--
-- One row per workspace, session and card; a later decision on the same card replaces the
-- earlier one. The card is a foreign key of the same workspace (a card of another workspace
-- cannot be decided in this one, at the database level as for links); deleting the card removes
-- its decisions (a decision holds no content of the card, only its id). Isolated by workspace
-- under forced row-level security like the workflow tables of 003.
SET LOCAL ROLE memarc_migrator;

CREATE TABLE session_decisions (
    seq          bigint GENERATED ALWAYS AS IDENTITY,  -- the order within one request
    workspace_id text NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    session_id   text NOT NULL CHECK (length(session_id) BETWEEN 1 AND 200),
    card_id      uuid NOT NULL,
    decision     text NOT NULL CHECK (decision IN ('accepted', 'rejected')),
    decided_by   text NOT NULL,
    decided_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, session_id, card_id),
    FOREIGN KEY (workspace_id, card_id) REFERENCES cards (workspace_id, id) ON DELETE CASCADE
);
-- the deletion of a card finds its decisions
CREATE INDEX session_decisions_card_idx ON session_decisions (card_id);

ALTER TABLE session_decisions ENABLE ROW LEVEL SECURITY;
ALTER TABLE session_decisions FORCE ROW LEVEL SECURITY;
CREATE POLICY workspace_isolation ON session_decisions
    USING (workspace_id = current_setting('memarc.workspace', true))
    WITH CHECK (workspace_id = current_setting('memarc.workspace', true));

-- Runtime: record a decision and change it (a decision replaced by a later one). Reader
-- (explorer, recall through the reader role): SELECT only.
GRANT SELECT, INSERT, UPDATE ON session_decisions TO memarc_runtime;
GRANT SELECT ON session_decisions TO memarc_reader;
