-- 007: restart job ids (issue 14).
--
-- A rebuild whose run died (SIGKILL) is restarted under a job id of its own: the sweep needs the
-- expired lease's time to name it (shared/projection/queue.py, rebuild_job_id).
SET LOCAL ROLE memarc_migrator;

DROP FUNCTION workspaces_with_open_rebuilds();
CREATE FUNCTION workspaces_with_open_rebuilds()
RETURNS TABLE (workspace_id text, rebuild_id uuid, expired_lease timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT workspace_id, id, CASE WHEN status = 'running' THEN lease_expires_at END
    FROM index_rebuilds
    WHERE status = 'queued' OR (status = 'running' AND lease_expires_at < now())
$$;
REVOKE ALL ON FUNCTION workspaces_with_open_rebuilds() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION workspaces_with_open_rebuilds() TO memarc_runtime;
