-- 019: the metrics' projection queue figures in one statement per scrape (issue 25, case 7).
--
-- `GET /metrics` used to list the workspaces and then open one transaction per workspace to read
-- its operations under row-level security: 2 transactions with 1 workspace, 52 with 51, and the
-- scrape's time grew with them. This definer function reads every workspace's figures in one
-- scan, so a scrape costs one transaction and one statement whatever the number of workspaces.
-- It returns counts and ages only (never card ids or content); a workspace without operations
-- still has its row (status NULL), so its series read 0.
--
-- Idempotent (CREATE OR REPLACE), like 013.
SET LOCAL ROLE memarc_migrator;

-- Per workspace, status and lag bucket: the count, the age in seconds of the oldest, and the
-- sum of the lags (queued to completed) of the done ones. The buckets are `neg_bounds`, the
-- upper bounds b_1 < ... < b_n negated and ascending (-b_n, ..., -b_1): width_bucket(-lag, ...)
-- counts the bounds >= lag, so `n` minus it is the 0-based index of the first bound >= lag
-- (n: above every bound), as Prometheus's `le`.
CREATE OR REPLACE FUNCTION projection_queue_summary(n integer, neg_bounds float8[])
RETURNS TABLE (workspace_id text, status text, bucket integer, n_ops bigint,
               oldest_seconds float8, lag_sum float8)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT w.id, o.status,
           CASE WHEN o.status = 'done' AND o.completed_at IS NOT NULL
                THEN n - width_bucket(extract(epoch FROM o.created_at - o.completed_at)::float8,
                                      neg_bounds) END,
           count(o.id),
           extract(epoch FROM now() - min(o.created_at))::float8,
           sum(extract(epoch FROM o.completed_at - o.created_at)::float8)
    FROM workspaces w LEFT JOIN projection_ops o ON o.workspace_id = w.id
    GROUP BY 1, 2, 3
    ORDER BY 1
$$;

REVOKE ALL ON FUNCTION projection_queue_summary(integer, float8[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION projection_queue_summary(integer, float8[]) TO memarc_runtime;
