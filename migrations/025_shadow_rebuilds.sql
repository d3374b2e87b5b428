-- 025: safe model changes (issue 34 item 4, docs/evaluation.md "Changing the model safely").
--
-- A workspace's index now records the dense model its collection was built with, next to the
-- collection itself (`index_collections`, migration 022): NULL columns mean the process's
-- configured model (MEMARC_DENSE_MODEL / MEMARC_DENSE_MODEL_PATH), a value a model that a shadow
-- rebuild switched in. Recall and projection read the collection and its model in one row, so a
-- recall that started before a switch queries the collection it read with that collection's
-- model.
--
-- After a shadow switch the collection it replaced is kept, with its model, as the workspace's
-- `previous_*` index: `memarc index --switch-back` catches it up and switches back to it (the
-- newer one becomes the previous), `memarc index --drop-previous` drops it.
--
-- `index_rebuilds.shadow` says a rebuild is a shadow one: `{"dense_model", "dense_model_path",
-- "force", "restore"}`. A shadow rebuild builds the new collection while recall keeps serving
-- the old one, evaluates both on the same cases (`eval_runs.candidate` names the collection a
-- candidate run recalled from; such a run is never the base of a later comparison), and
-- switches only when the new one is not worse or `force` says so; otherwise it ends `declined`.
--
-- Written to apply again over its own objects (tests undo migrations down to 005).
SET LOCAL ROLE memarc_migrator;

ALTER TABLE index_collections
    ADD COLUMN IF NOT EXISTS dense_model text,
    ADD COLUMN IF NOT EXISTS dense_model_path text,
    ADD COLUMN IF NOT EXISTS previous_collection text,
    ADD COLUMN IF NOT EXISTS previous_dense_model text,
    ADD COLUMN IF NOT EXISTS previous_dense_model_path text,
    ADD COLUMN IF NOT EXISTS switched_at timestamptz;

ALTER TABLE index_rebuilds ADD COLUMN IF NOT EXISTS shadow jsonb;
ALTER TABLE index_rebuilds DROP CONSTRAINT IF EXISTS index_rebuilds_status_check;
ALTER TABLE index_rebuilds ADD CONSTRAINT index_rebuilds_status_check
    CHECK (status IN ('queued', 'running', 'done', 'failed', 'declined'));

ALTER TABLE eval_runs ADD COLUMN IF NOT EXISTS candidate text;

-- the sweep's "newest import" of every workspace (evaluation_states) by index, not by a scan of
-- the workspace's whole activity
CREATE INDEX IF NOT EXISTS activity_verb_recent_idx ON activity (workspace_id, verb, at DESC);

DROP FUNCTION IF EXISTS evaluation_states();
CREATE FUNCTION evaluation_states()
RETURNS TABLE (workspace_id text, language text, open_work boolean, projected bigint,
               last_run_at timestamptz, last_status text, last_fingerprint text, last_format integer,
               last_profile_digest text, last_import_at timestamptz,
               last_rebuild_at timestamptz, open_run uuid, open_run_expired_lease timestamptz,
               dense_model text, dense_model_path text)
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
           open.id, CASE WHEN open.status = 'running' THEN open.lease_expires_at END,
           ic.dense_model, ic.dense_model_path
    FROM workspaces w
    LEFT JOIN index_collections ic ON ic.workspace_id = w.id
    LEFT JOIN LATERAL (SELECT e.created_at, e.status, e.fingerprint, e.format, e.profile_digest
                       FROM eval_runs e WHERE e.workspace_id = w.id AND e.candidate IS NULL
                       ORDER BY e.created_at DESC, e.id DESC LIMIT 1) last ON true
    LEFT JOIN LATERAL (SELECT e.id, e.status, e.lease_expires_at FROM eval_runs e
                       WHERE e.workspace_id = w.id AND e.status IN ('queued', 'running')
                       AND (e.status = 'queued' OR e.lease_expires_at < now())
                       LIMIT 1) open ON true
$$;
REVOKE ALL ON FUNCTION evaluation_states() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION evaluation_states() TO memarc_runtime;

DROP FUNCTION IF EXISTS evaluation_latest();
CREATE FUNCTION evaluation_latest()
RETURNS TABLE (workspace_id text, figures jsonb, regressions bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT w.id, last.figures,
           (SELECT count(*) FROM eval_runs e WHERE e.workspace_id = w.id AND e.regression
                   AND e.candidate IS NULL)
    FROM workspaces w
    JOIN LATERAL (SELECT e.figures FROM eval_runs e WHERE e.workspace_id = w.id
                  AND e.status = 'done' AND e.candidate IS NULL
                  ORDER BY e.finished_at DESC, e.id DESC LIMIT 1) last
      ON true
$$;
REVOKE ALL ON FUNCTION evaluation_latest() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION evaluation_latest() TO memarc_runtime;
