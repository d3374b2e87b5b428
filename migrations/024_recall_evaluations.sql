-- 024: recall evaluations on the workspace's own knowledge (issue 34, docs/evaluation.md).
--
-- `eval_cases` holds the curated cases: a question, a recall mode, optional filters and the
-- cards recall is expected to return (any one of them, or all of them). The derived cases are
-- not stored: they are rebuilt from the cards and their links at every run
-- (shared/evaluation/cases.py). An expected card that is deleted later stays named here; the
-- run skips the case and says so.
--
-- `eval_runs` holds one evaluation run each: queued by a person or by the worker's sweep
-- (`trigger`), leased by the worker that runs it (as index rebuilds are), and, once done, what
-- it measured: the model fingerprint, projection format and fusion profiles it ran with, the
-- figures per mode and source, each miss, and each case's rank (`outcomes`), which the next run
-- compares with case by case (the paired test of shared/evaluation/compare.py).
-- One run per workspace may be queued or running at a time.
SET LOCAL ROLE memarc_migrator;

CREATE TABLE eval_cases (
    id           uuid PRIMARY KEY,
    workspace_id text NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    question     text NOT NULL CHECK (length(question) BETWEEN 1 AND 4000),
    mode         text NOT NULL CHECK (mode IN ('search', 'rules', 'solved')),
    filters      jsonb NOT NULL DEFAULT '{}'::jsonb,
    expected     uuid[] NOT NULL CHECK (cardinality(expected) BETWEEN 1 AND 20),
    match        text NOT NULL DEFAULT 'any' CHECK (match IN ('any', 'all')),
    note         text,
    created_by   text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX eval_cases_recent ON eval_cases (workspace_id, created_at, id);

CREATE TABLE eval_runs (
    id             uuid PRIMARY KEY,
    workspace_id   text NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    status         text NOT NULL DEFAULT 'queued'
                   CHECK (status IN ('queued', 'running', 'done', 'failed')),
    trigger        text NOT NULL,
    requested_by   text NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    started_at     timestamptz,
    finished_at    timestamptz,
    lease_expires_at timestamptz,
    done           integer NOT NULL DEFAULT 0,
    total          integer,
    fingerprint    text,
    format         integer,
    profiles       jsonb,
    profile_digest text,
    figures        jsonb,
    misses         jsonb,
    outcomes       jsonb,
    compared_with  uuid,
    regressions    jsonb,
    regression     boolean,
    seconds        double precision,
    error          text
);
CREATE UNIQUE INDEX eval_runs_one_active ON eval_runs (workspace_id)
    WHERE status IN ('queued', 'running');
CREATE INDEX eval_runs_recent ON eval_runs (workspace_id, created_at DESC, id DESC);

DO $$
DECLARE t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['eval_cases', 'eval_runs'] LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY workspace_isolation ON %I '
                       'USING (workspace_id = current_setting(''memarc.workspace'', true)) '
                       'WITH CHECK (workspace_id = current_setting(''memarc.workspace'', true))', t);
        EXECUTE format('CREATE POLICY owner_all ON %I TO memarc_migrator USING (true)', t);
    END LOOP;
END $$;
GRANT SELECT, INSERT, UPDATE, DELETE ON eval_cases TO memarc_runtime;
GRANT SELECT, INSERT, UPDATE ON eval_runs TO memarc_runtime;
GRANT SELECT ON eval_cases, eval_runs TO memarc_reader;

-- The definer functions below read `projections` and `activity` across workspaces as the owner,
-- which, like the other tables' owner, needs a policy of its own under forced row-level security.
CREATE POLICY owner_all ON projections TO memarc_migrator USING (true);
CREATE POLICY owner_all ON activity TO memarc_migrator USING (true);

-- What the worker's sweep needs to decide, across workspaces, whether an evaluation is due
-- (shared/evaluation/schedule.py): per workspace its language, whether projection work is open
-- (an evaluation waits until the index has settled), how many cards are projected, the newest
-- run (with its fingerprint, format and profile digest), the newest import and the newest
-- finished rebuild, and a queued or running run whose job may have been lost.
CREATE FUNCTION evaluation_states()
RETURNS TABLE (workspace_id text, language text, open_work boolean, projected bigint,
               last_run_at timestamptz, last_status text, last_fingerprint text, last_format integer,
               last_profile_digest text, last_import_at timestamptz,
               last_rebuild_at timestamptz, open_run uuid, open_run_expired_lease timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT w.id, w.language,
           EXISTS (SELECT 1 FROM projection_ops o WHERE o.workspace_id = w.id
                   AND o.status IN ('pending', 'running'))
           OR EXISTS (SELECT 1 FROM index_rebuilds r WHERE r.workspace_id = w.id
                      AND r.status IN ('queued', 'running')),
           (SELECT count(*) FROM projections p WHERE p.workspace_id = w.id),
           last.created_at, last.status, last.fingerprint, last.format, last.profile_digest,
           (SELECT max(a.at) FROM activity a WHERE a.workspace_id = w.id AND a.verb = 'import'
                   AND a.outcome = 'ok'  -- an import that created or changed a card
                   AND coalesce((a.detail ->> 'created')::int, 0)
                       + coalesce((a.detail ->> 'updated')::int, 0) > 0),
           (SELECT max(r.finished_at) FROM index_rebuilds r WHERE r.workspace_id = w.id
                   AND r.status = 'done'),
           open.id, CASE WHEN open.status = 'running' THEN open.lease_expires_at END
    FROM workspaces w
    LEFT JOIN LATERAL (SELECT e.created_at, e.status, e.fingerprint, e.format, e.profile_digest
                       FROM eval_runs e WHERE e.workspace_id = w.id
                       ORDER BY e.created_at DESC, e.id DESC LIMIT 1) last ON true
    LEFT JOIN LATERAL (SELECT e.id, e.status, e.lease_expires_at FROM eval_runs e
                       WHERE e.workspace_id = w.id AND e.status IN ('queued', 'running')
                       AND (e.status = 'queued' OR e.lease_expires_at < now())
                       LIMIT 1) open ON true
$$;
REVOKE ALL ON FUNCTION evaluation_states() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION evaluation_states() TO memarc_runtime;

-- The latest finished run of every workspace, for /metrics (figures only, no card content).
CREATE FUNCTION evaluation_latest()
RETURNS TABLE (workspace_id text, figures jsonb, regressions bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT w.id, last.figures,
           (SELECT count(*) FROM eval_runs e WHERE e.workspace_id = w.id AND e.regression)
    FROM workspaces w
    JOIN LATERAL (SELECT e.figures FROM eval_runs e WHERE e.workspace_id = w.id
                  AND e.status = 'done' ORDER BY e.finished_at DESC, e.id DESC LIMIT 1) last
      ON true
$$;
REVOKE ALL ON FUNCTION evaluation_latest() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION evaluation_latest() TO memarc_runtime;
