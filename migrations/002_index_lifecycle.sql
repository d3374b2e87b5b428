-- 002: index lifecycle: projection format versions and tracked index rebuilds (DESIGN §3-4).
--
-- The projection format is a number in the code (shared/repository.py PROJECTION_FORMAT). Each
-- raise of that number ships as a numbered migration that records it here, without touching
-- cards: older projections then show as pending and are excluded from recall until `retry` or
-- `index` re-projects them. Runtime processes refuse to start when the code's format is not
-- recorded (the migration was not applied).
SET LOCAL ROLE memarc_migrator;

CREATE TABLE projection_formats (
    format      integer PRIMARY KEY CHECK (format >= 1),
    note        text NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
);

INSERT INTO projection_formats (format, note) VALUES
    (1, 'title, content fields, scope, concepts and qualified dependency names; dense '
        'sentence-transformers/all-MiniLM-L6-v2 + Qdrant/bm25 sparse with IDF; payload '
        'workspace, family, scope, concepts, deps, revision, format');

GRANT SELECT ON projection_formats TO memarc_runtime, memarc_reader;

-- A rebuild of a workspace's projection into a new collection, tracked for the API and the CLI.
CREATE TABLE index_rebuilds (
    id           uuid PRIMARY KEY,
    workspace_id text NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    status       text NOT NULL DEFAULT 'queued'
                 CHECK (status IN ('queued', 'running', 'done', 'failed')),
    requested_by text NOT NULL,
    total        integer,
    done         integer NOT NULL DEFAULT 0,
    collection   text,
    summary      jsonb,
    error        text,
    lease_expires_at timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    started_at   timestamptz,
    finished_at  timestamptz
);
CREATE UNIQUE INDEX index_rebuilds_one_active ON index_rebuilds (workspace_id)
    WHERE status IN ('queued', 'running');
CREATE INDEX index_rebuilds_recent ON index_rebuilds (workspace_id, created_at DESC);

ALTER TABLE index_rebuilds ENABLE ROW LEVEL SECURITY;
ALTER TABLE index_rebuilds FORCE ROW LEVEL SECURITY;
CREATE POLICY workspace_isolation ON index_rebuilds
    USING (workspace_id = current_setting('memarc.workspace', true))
    WITH CHECK (workspace_id = current_setting('memarc.workspace', true));
CREATE POLICY owner_all ON index_rebuilds TO memarc_migrator USING (true);
GRANT SELECT, INSERT, UPDATE ON index_rebuilds TO memarc_runtime;
GRANT SELECT ON index_rebuilds TO memarc_reader;

-- Workspaces with a rebuild to (re)start, for the sweep.
CREATE FUNCTION workspaces_with_open_rebuilds()
RETURNS TABLE (workspace_id text, rebuild_id uuid)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT workspace_id, id FROM index_rebuilds
    WHERE status = 'queued' OR (status = 'running' AND lease_expires_at < now())
$$;
REVOKE ALL ON FUNCTION workspaces_with_open_rebuilds() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION workspaces_with_open_rebuilds() TO memarc_runtime;
