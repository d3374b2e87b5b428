-- 018: sessions of the administration pages in the browser (issue 24, DESIGN §12).
--
-- A person signs in once with an API token (or with a one-time sign-in link that `memarc
-- sign-in-link` prints), and then holds a session cookie. The session is a row here, bound to the
-- token it was opened with: every request reads it together with its token, so a revoked or
-- expired token ends its sessions at once, and so does sign-out (`ended_at`). Only SHA-256
-- digests of the cookie's secret and of the link's code are stored.
--
-- Idempotent (IF NOT EXISTS, CREATE OR REPLACE), like 013.
SET LOCAL ROLE memarc_migrator;

CREATE TABLE IF NOT EXISTS admin_sessions (
    id           uuid PRIMARY KEY,
    workspace_id text NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    secret_hash  bytea NOT NULL UNIQUE,
    token_id     uuid NOT NULL REFERENCES api_tokens (id) ON DELETE CASCADE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    ended_at     timestamptz
);
CREATE INDEX IF NOT EXISTS admin_sessions_token_idx ON admin_sessions (token_id);

-- A one-time sign-in link: its code (digest) names a token of the workspace; redeeming it marks
-- it used (once), before it expires.
CREATE TABLE IF NOT EXISTS admin_sign_in_links (
    code_hash    bytea PRIMARY KEY,
    workspace_id text NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    token_id     uuid NOT NULL REFERENCES api_tokens (id) ON DELETE CASCADE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    used_at      timestamptz
);

DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['admin_sessions', 'admin_sign_in_links'] LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format('DROP POLICY IF EXISTS workspace_isolation ON %I', t);
        EXECUTE format(
            'CREATE POLICY workspace_isolation ON %I USING (workspace_id = current_setting(''memarc.workspace'', true)) '
            'WITH CHECK (workspace_id = current_setting(''memarc.workspace'', true))', t);
        EXECUTE format('DROP POLICY IF EXISTS owner_all ON %I', t);
        EXECUTE format('CREATE POLICY owner_all ON %I TO memarc_migrator USING (true)', t);
    END LOOP;
END
$$;

-- The runtime opens and ends sessions of its workspace; links are created by the bootstrap
-- command (migrator) and redeemed through the definer function below.
GRANT SELECT, INSERT, UPDATE ON admin_sessions TO memarc_runtime;

-- A session by the digest of its cookie, with its token, before any workspace is known (as
-- authenticate_token): one row or none, never a listing.
CREATE OR REPLACE FUNCTION admin_session_principal(digest bytea)
RETURNS TABLE (session_id uuid, workspace_id text, token_id uuid, permissions text[],
               database_name text, schema_name text, expires_at timestamptz,
               ended_at timestamptz, token_expires_at timestamptz, revoked_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT s.id, s.workspace_id, t.id, t.permissions, t.database_name, t.schema_name,
           s.expires_at, s.ended_at, t.expires_at, t.revoked_at
    FROM admin_sessions s JOIN api_tokens t ON t.id = s.token_id
                                           AND t.workspace_id = s.workspace_id
    WHERE s.secret_hash = digest
$$;

-- Redeem a sign-in link: marks it used and returns its token, only when it was unused and
-- unexpired (a second use returns nothing).
CREATE OR REPLACE FUNCTION admin_redeem_sign_in_link(digest bytea)
RETURNS TABLE (token_id uuid, workspace_id text, permissions text[], database_name text,
               schema_name text, expires_at timestamptz, revoked_at timestamptz)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    WITH used AS (
        UPDATE admin_sign_in_links SET used_at = now()
        WHERE code_hash = digest AND used_at IS NULL AND expires_at > now()
        RETURNING admin_sign_in_links.token_id, admin_sign_in_links.workspace_id
    )
    SELECT t.id, t.workspace_id, t.permissions, t.database_name, t.schema_name, t.expires_at,
           t.revoked_at
    FROM used u JOIN api_tokens t ON t.id = u.token_id AND t.workspace_id = u.workspace_id
$$;

REVOKE ALL ON FUNCTION admin_session_principal(bytea), admin_redeem_sign_in_link(bytea)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION admin_session_principal(bytea), admin_redeem_sign_in_link(bytea)
    TO memarc_runtime;
