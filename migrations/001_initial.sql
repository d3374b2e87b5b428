-- 001: the archive's tables, roles and row-level security.
--
-- Applied by `memarc migrate` with the migrator credentials, inside one transaction, with
-- search_path set to the archive schema (default `memory`), which the runner creates first.
-- Object names are unqualified on purpose: the schema is an installation setting.

-- Roles are cluster-wide: create them idempotently (several databases on one server share them,
-- and two migrations may race to create them).
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['memarc_migrator', 'memarc_runtime', 'memarc_reader'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', r);
            EXCEPTION WHEN duplicate_object OR unique_violation THEN
                NULL;
            END;
        END IF;
    END LOOP;
END
$$;

-- The schema belongs to the migrator role; runtime and reader may only look things up in it.
-- The login running the migration becomes a member of the migrator role.
DO $$
BEGIN
    IF NOT pg_has_role(current_user, 'memarc_migrator', 'MEMBER') THEN
        EXECUTE format('GRANT memarc_migrator TO %I', current_user);
    END IF;
    EXECUTE format('ALTER SCHEMA %I OWNER TO memarc_migrator', current_schema());
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO memarc_runtime, memarc_reader', current_schema());
    EXECUTE format('REVOKE CREATE ON SCHEMA %I FROM PUBLIC', current_schema());
END
$$;

-- Everything below is created as, and owned by, the migrator role.
SET LOCAL ROLE memarc_migrator;

CREATE TABLE workspaces (
    id          text PRIMARY KEY CHECK (id ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    language    text NOT NULL DEFAULT 'en' CHECK (language IN ('en', 'it')),
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE cards (
    workspace_id text NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    id          uuid NOT NULL,
    family      text NOT NULL CHECK (family IN ('domain_clarification', 'sql_rule', 'solved_question', 'explained_error')),
    title       text NOT NULL CHECK (length(btrim(title)) > 0 AND length(title) <= 200),
    scope       text CHECK (scope IS NULL OR length(scope) <= 200),
    origin      text NOT NULL CHECK (origin IN ('manual', 'workflow', 'import')),
    source      jsonb,
    concepts    text[] NOT NULL DEFAULT '{}',
    content     jsonb NOT NULL,
    revision    integer NOT NULL DEFAULT 1 CHECK (revision >= 1),
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (id),
    UNIQUE (workspace_id, id)
);
CREATE INDEX cards_list_idx ON cards (workspace_id, updated_at DESC, id);
CREATE INDEX cards_family_idx ON cards (workspace_id, family);
CREATE INDEX cards_concepts_idx ON cards USING gin (concepts);

-- One row per dependency entry: a prefix of database.schema.table.column, no gaps.
CREATE TABLE card_dependencies (
    workspace_id  text NOT NULL,
    card_id       uuid NOT NULL,
    ordinal       smallint NOT NULL,
    database_name text NOT NULL CHECK (length(database_name) BETWEEN 1 AND 200),
    schema_name   text CHECK (schema_name IS NULL OR length(schema_name) BETWEEN 1 AND 200),
    table_name    text CHECK (table_name IS NULL OR length(table_name) BETWEEN 1 AND 200),
    column_name   text CHECK (column_name IS NULL OR length(column_name) BETWEEN 1 AND 200),
    PRIMARY KEY (card_id, ordinal),
    FOREIGN KEY (workspace_id, card_id) REFERENCES cards (workspace_id, id) ON DELETE CASCADE,
    CHECK (table_name IS NULL OR schema_name IS NOT NULL),
    CHECK (column_name IS NULL OR table_name IS NOT NULL)
);
CREATE INDEX card_dependencies_lookup_idx
    ON card_dependencies (workspace_id, database_name, schema_name, table_name, column_name);

-- Outgoing links. Both ends carry the same workspace_id column, so a cross-workspace link is
-- impossible at the database level; deleting either card removes the link.
CREATE TABLE card_links (
    workspace_id text NOT NULL,
    source_id    uuid NOT NULL,
    target_id    uuid NOT NULL,
    meaning      text NOT NULL DEFAULT '' CHECK (length(meaning) <= 200),
    PRIMARY KEY (source_id, target_id),
    FOREIGN KEY (workspace_id, source_id) REFERENCES cards (workspace_id, id) ON DELETE CASCADE,
    FOREIGN KEY (workspace_id, target_id) REFERENCES cards (workspace_id, id) ON DELETE CASCADE,
    CHECK (source_id <> target_id)
);
CREATE INDEX card_links_target_idx ON card_links (target_id);

-- The outbox: one projection operation per affected card and committed change.
-- `card_id` has no foreign key: a delete operation outlives its card.
CREATE TABLE projection_ops (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workspace_id     text NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    card_id          uuid NOT NULL,
    op               text NOT NULL CHECK (op IN ('upsert', 'delete')),
    revision         integer,
    status           text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'running', 'done', 'failed')),
    attempts         integer NOT NULL DEFAULT 0,
    lease_expires_at timestamptz,
    last_error       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    completed_at     timestamptz
);
CREATE INDEX projection_ops_open_idx ON projection_ops (workspace_id, status, id) WHERE status <> 'done';
CREATE INDEX projection_ops_card_idx ON projection_ops (card_id) WHERE status <> 'done';

-- The valid projection recorded by a worker after Qdrant confirmed the write.
CREATE TABLE projections (
    workspace_id text NOT NULL,
    card_id      uuid NOT NULL PRIMARY KEY,
    revision     integer NOT NULL,
    format       integer NOT NULL,
    projected_at timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (workspace_id, card_id) REFERENCES cards (workspace_id, id) ON DELETE CASCADE
);

-- Every state change and every rejected or failed attempt at one.
CREATE TABLE activity (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workspace_id text NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    at           timestamptz NOT NULL DEFAULT now(),
    actor        text NOT NULL,
    verb         text NOT NULL,
    card_id      uuid,
    outcome      text NOT NULL,
    detail       jsonb
);
CREATE INDEX activity_recent_idx ON activity (workspace_id, at DESC, id DESC);

-- API tokens: only a SHA-256 digest is stored; the secret is shown once.
CREATE TABLE api_tokens (
    id            uuid PRIMARY KEY,
    workspace_id  text NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    token_hash    bytea NOT NULL UNIQUE,
    permissions   text[] NOT NULL,
    database_name text,
    schema_name   text,
    label         text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz,
    revoked_at    timestamptz,
    last_used_at  timestamptz,
    CHECK (schema_name IS NULL OR database_name IS NOT NULL)
);

-- Row-level security: every workspace table is filtered by the transaction's workspace
-- (`memarc.workspace`, set with set_config(..., true) by every transaction). FORCE applies it to
-- the owner too; superusers and BYPASSRLS roles are exempt, which is why every transaction also
-- does SET LOCAL ROLE to memarc_runtime or memarc_reader.
ALTER TABLE workspaces ENABLE ROW LEVEL SECURITY;
ALTER TABLE workspaces FORCE ROW LEVEL SECURITY;
CREATE POLICY workspace_isolation ON workspaces
    USING (id = current_setting('memarc.workspace', true));

DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['cards', 'card_dependencies', 'card_links', 'projection_ops',
                             'projections', 'activity', 'api_tokens'] LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format(
            'CREATE POLICY workspace_isolation ON %I USING (workspace_id = current_setting(''memarc.workspace'', true)) '
            'WITH CHECK (workspace_id = current_setting(''memarc.workspace'', true))', t);
    END LOOP;
END
$$;

-- The owner (used only by the SECURITY DEFINER functions below) sees every workspace.
CREATE POLICY owner_all ON workspaces TO memarc_migrator USING (true);
CREATE POLICY owner_all ON api_tokens TO memarc_migrator USING (true);
CREATE POLICY owner_all ON projection_ops TO memarc_migrator USING (true);

-- Runtime: DML on the archive tables, no DDL. Reader: SELECT only.
GRANT SELECT ON workspaces TO memarc_runtime, memarc_reader;
GRANT SELECT, INSERT, UPDATE, DELETE ON cards, card_dependencies, card_links, projection_ops,
    projections, api_tokens TO memarc_runtime;
GRANT SELECT, INSERT ON activity TO memarc_runtime;
GRANT SELECT ON cards, card_dependencies, card_links, projection_ops, projections, activity
    TO memarc_reader;

-- Token look-up happens before a workspace is known: a definer function returns the one row that
-- matches a digest, never a listing.
CREATE FUNCTION authenticate_token(digest bytea)
RETURNS TABLE (token_id uuid, workspace_id text, permissions text[], database_name text,
               schema_name text, expires_at timestamptz, revoked_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT id, workspace_id, permissions, database_name, schema_name, expires_at, revoked_at
    FROM api_tokens WHERE token_hash = digest
$$;

CREATE FUNCTION touch_token(tid uuid) RETURNS void
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    UPDATE api_tokens SET last_used_at = now()
    WHERE id = tid AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute')
$$;

-- Workspace ids and languages, for the explorer's workspace list (filtered by Datasette
-- permissions afterwards) and the worker's sweep.
CREATE FUNCTION workspace_list()
RETURNS TABLE (id text, language text, created_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT id, language, created_at FROM workspaces ORDER BY id
$$;

-- Workspaces with open projection work, for the sweep.
CREATE FUNCTION workspaces_with_open_ops()
RETURNS TABLE (workspace_id text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT DISTINCT workspace_id FROM projection_ops WHERE status IN ('pending', 'running')
$$;

REVOKE ALL ON FUNCTION authenticate_token(bytea), touch_token(uuid), workspace_list(),
    workspaces_with_open_ops() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION authenticate_token(bytea), touch_token(uuid), workspace_list(),
    workspaces_with_open_ops() TO memarc_runtime;
GRANT EXECUTE ON FUNCTION workspace_list() TO memarc_reader;
