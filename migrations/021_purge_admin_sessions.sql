-- 021: ended administration sessions and used sign-in links are purged (issue 24).
--
-- Migration 018 keeps a row per browser session and per one-time sign-in link; sign-out, expiry
-- and a revoked token end a session but leave its row, and a used or expired link stays too, so
-- both tables grew with every sign-in forever. This definer function deletes, in every
-- workspace, the sessions that ended (signed out, past their expiry, or their token revoked or
-- expired) and the links that were used or expired, once `grace` has passed since: during the
-- grace, a browser that still holds such a cookie is told why it is signed out ("revoked",
-- "expired") rather than just "please sign in". The worker's periodic sweep calls it (the
-- runtime role cannot delete these rows itself). It returns counts only.
--
-- Idempotent (CREATE OR REPLACE), like 013.
SET LOCAL ROLE memarc_migrator;

CREATE OR REPLACE FUNCTION admin_purge_ended(grace interval)
RETURNS TABLE (sessions bigint, links bigint)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    WITH gone_sessions AS (
        DELETE FROM admin_sessions s USING api_tokens t
        WHERE t.id = s.token_id
          AND least(s.ended_at, s.expires_at, t.revoked_at, t.expires_at) < now() - grace
        RETURNING s.id
    ), gone_links AS (
        DELETE FROM admin_sign_in_links
        WHERE least(used_at, expires_at) < now() - grace
        RETURNING code_hash
    )
    SELECT (SELECT count(*) FROM gone_sessions), (SELECT count(*) FROM gone_links)
$$;

REVOKE ALL ON FUNCTION admin_purge_ended(interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION admin_purge_ended(interval) TO memarc_runtime;
