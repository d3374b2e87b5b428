-- Runtime queries of the memory archive, by name (Q.<name>). Only the store modules under
-- shared/store/ run them; each section names the module that does.
-- Every query runs inside Database.transaction(): role and workspace (RLS) are already set.

-- ==== database: transactions (shared/store/database.py) ====
-- The workspace advisory lock, as expressions for the one-statement transaction set-up.
-- name: database_workspace_lock_expr
-- The workspace's write lock (exclusive), as an expression for the transaction's set-up.
pg_advisory_xact_lock(hashtextextended('memarc.workspace:' || %(workspace)s, 0))

-- name: database_workspace_lock_shared_expr
-- The workspace's lock in shared mode (recall's reads), as an expression for the set-up.
pg_advisory_xact_lock_shared(hashtextextended('memarc.workspace:' || %(workspace)s, 0))

-- ==== workspaces (shared/store/workspaces.py) ====
-- name: workspaces_get
-- The workspace row, or nothing when it does not exist.
SELECT id, language, created_at FROM workspaces WHERE id = %(workspace)s;

-- name: workspaces_list
-- Every workspace in id order, through a definer function (the explorer's list, the sweep).
SELECT id, language, created_at FROM workspace_list();

-- name: workspaces_removals_pending
-- Removed workspaces whose index collection is still to drop (the worker's sweep).
SELECT id, workspace FROM workspace_removals_pending();

-- name: workspaces_removals_index_result
-- Record the sweep's attempt to drop a removed workspace's collection (error NULL: done).
SELECT workspace_removal_index_result(%(id)s, %(error)s);

-- name: workspaces_index_collection
-- The collection recorded as holding the workspace's valid projections (migration 022): no row
-- when none was recorded yet, a NULL collection while a lost one is being rebuilt.
SELECT collection, recorded_at, dense_model, dense_model_path, previous_collection,
       previous_dense_model, previous_dense_model_path, switched_at
FROM index_collections;

-- name: workspaces_record_index_collection
-- Record the collection that holds the workspace's valid projections (NULL: none; the one
-- recorded was lost and a rebuild is under way).
INSERT INTO index_collections (workspace_id, collection, recorded_at)
VALUES (%(workspace)s, %(collection)s, now())
ON CONFLICT (workspace_id) DO UPDATE
SET collection = EXCLUDED.collection, recorded_at = EXCLUDED.recorded_at;

-- name: workspaces_switch_index_collection
-- A shadow switch or a switch back (migration 025): the collection and its model become the
-- workspace's, the one they replace is kept as the previous index (NULL: dropped, or none).
UPDATE index_collections
SET previous_collection = collection, previous_dense_model = dense_model,
    previous_dense_model_path = dense_model_path,
    collection = %(collection)s, dense_model = %(dense_model)s,
    dense_model_path = %(dense_model_path)s, recorded_at = now(), switched_at = now()
WHERE workspace_id = %(workspace)s;

-- name: workspaces_forget_previous_index
-- The previous index was dropped (or lost): nothing to switch back to.
UPDATE index_collections
SET previous_collection = NULL, previous_dense_model = NULL, previous_dense_model_path = NULL
WHERE workspace_id = %(workspace)s;

-- ==== cards: cards, dependencies, links (shared/store/cards.py) ====
-- name: cards_insert
-- Insert a new card; returns its first revision.
INSERT INTO cards (workspace_id, id, family, title, scope, origin, source, concepts, content)
VALUES (%(workspace)s, %(id)s, %(family)s, %(title)s, %(scope)s, %(origin)s, %(source)s,
        %(concepts)s, %(content)s)
RETURNING revision;

-- name: cards_insert_imported
-- A card of an import, which remembers its line's key (migration 011).
INSERT INTO cards (workspace_id, id, family, title, scope, origin, source, concepts, content,
                   import_key)
VALUES (%(workspace)s, %(id)s, %(family)s, %(title)s, %(scope)s, %(origin)s, %(source)s,
        %(concepts)s, %(content)s, %(import_key)s);

-- name: cards_by_key
-- The cards of the workspace whose key (card_key(): the import key, else the id) is one of
-- %(keys)s (served by cards_key_idx).
SELECT card_key(c.import_key, c.id) AS key, c.id
FROM cards c
WHERE card_key(c.import_key, c.id) COLLATE "C" = ANY(%(keys)s::text[]);

-- name: cards_unkeyed_imported
-- Cards imported before migration 011 that no import has adopted yet (served by
-- cards_unkeyed_import_idx).
SELECT id FROM cards WHERE import_key IS NULL AND origin = 'import' ORDER BY created_at, id;

-- name: cards_set_import_keys
-- Give cards imported before migration 011 the keys of the lines that adopted them (%(ids)s and
-- %(keys)s side by side); nothing else of the card changes.
UPDATE cards c SET import_key = a.key
FROM unnest(%(ids)s::uuid[], %(keys)s::text[]) AS a(id, key)
WHERE c.id = a.id AND c.import_key IS NULL;

-- name: cards_export
-- Every card of the families %(families)s in key order (byte order: the same in every
-- workspace and database), as a cards-file line: its key, fields, dependencies in their order
-- and outgoing links by their targets' keys (in key order). Read through a server-side cursor.
SELECT card_key(c.import_key, c.id) AS key, c.family, c.title, c.scope, c.origin, c.source,
       c.concepts, c.content,
       coalesce((SELECT jsonb_agg(jsonb_build_object('database', d.database_name,
                                                     'schema', d.schema_name,
                                                     'table', d.table_name,
                                                     'column', d.column_name) ORDER BY d.ordinal)
                 FROM card_dependencies d WHERE d.card_id = c.id), '[]'::jsonb) AS dependencies,
       coalesce((SELECT jsonb_agg(jsonb_build_object('target', card_key(t.import_key, t.id),
                                                     'meaning', l.meaning)
                                  ORDER BY card_key(t.import_key, t.id) COLLATE "C")
                 FROM card_links l JOIN cards t ON t.id = l.target_id
                 WHERE l.source_id = c.id), '[]'::jsonb) AS links
FROM cards c
WHERE c.family = ANY(%(families)s::text[])
ORDER BY card_key(c.import_key, c.id) COLLATE "C";

-- name: cards_update
-- Replace a card's fields at the revision the caller edits, and bump it; no row when stale.
UPDATE cards
SET family = %(family)s, title = %(title)s, scope = %(scope)s, concepts = %(concepts)s,
    content = %(content)s, revision = revision + 1, updated_at = now()
WHERE id = %(id)s AND revision = %(revision)s
RETURNING revision;

-- name: cards_revision_for_update
-- A card's current revision, locking its row until the transaction ends.
SELECT revision FROM cards WHERE id = %(id)s FOR UPDATE;

-- name: cards_family
-- The family of one card (an update keeps it).
SELECT family FROM cards WHERE id = %(id)s;

-- name: cards_delete
-- Delete a card (dependencies, links both ways and its projection row cascade).
DELETE FROM cards WHERE id = %(id)s RETURNING id;

-- name: cards_ids_existing
-- The ids among %(ids)s that are cards of the workspace (link targets that exist).
SELECT id FROM cards WHERE id = ANY(%(ids)s);

-- name: cards_linked_questions
-- Per target card, the questions of the solved questions linking to it, by the source's id.
SELECT l.target_id, array_agg(s.content->>'question' ORDER BY s.id) AS questions
FROM card_links l JOIN cards s ON s.id = l.source_id
WHERE l.target_id = ANY(%(ids)s) AND s.family = 'solved_question'
  AND coalesce(s.content->>'question', '') <> ''
GROUP BY l.target_id;

-- name: cards_families
-- The family of each existing card among %(ids)s.
SELECT id, family FROM cards WHERE id = ANY(%(ids)s);

-- name: cards_revisions
-- Every card of the workspace with its current revision, in id order.
SELECT id, revision FROM cards ORDER BY id;

-- name: cards_projection_inputs
-- Every card with its revision and the questions of the solved cards linking to it (as
-- cards_linked_questions gives them; NULL when none): what its projection is made of, so that a
-- rebuild's catch-up sees a linking question that changed although the card's revision did not.
SELECT c.id, c.revision, lq.questions
FROM cards c LEFT JOIN (
    SELECT l.target_id, array_agg(s.content->>'question' ORDER BY s.id) AS questions
    FROM card_links l JOIN cards s ON s.id = l.source_id
    WHERE s.family = 'solved_question' AND coalesce(s.content->>'question', '') <> ''
    GROUP BY l.target_id) lq ON lq.target_id = c.id
ORDER BY c.id;

-- name: cards_dependencies_delete
-- Remove a card's dependency entries (before its new ones are written).
DELETE FROM card_dependencies WHERE card_id = %(card_id)s;

-- name: cards_dependencies_insert
-- One dependency entry of a card, at its ordinal.
INSERT INTO card_dependencies (workspace_id, card_id, ordinal, database_name, schema_name,
                               table_name, column_name)
VALUES (%(workspace)s, %(card_id)s, %(ordinal)s, %(database)s, %(schema)s, %(table)s, %(column)s);

-- name: cards_links_delete_outgoing
-- Remove a card's outgoing links (before its new ones are written).
DELETE FROM card_links WHERE source_id = %(card_id)s;

-- name: cards_links_insert
-- One outgoing link of a card, with its meaning.
INSERT INTO card_links (workspace_id, source_id, target_id, meaning)
VALUES (%(workspace)s, %(source_id)s, %(target_id)s, %(meaning)s);

-- name: cards_get
-- Full cards with dependencies, outgoing links and projection state, for ids in %(ids)s.
SELECT c.id, c.workspace_id, c.family, c.title, c.scope, c.origin, c.source, c.concepts,
       c.content, c.revision, c.created_at, c.updated_at,
       coalesce((SELECT jsonb_agg(jsonb_build_object('database', d.database_name,
                                                     'schema', d.schema_name,
                                                     'table', d.table_name,
                                                     'column', d.column_name) ORDER BY d.ordinal)
                 FROM card_dependencies d WHERE d.card_id = c.id), '[]'::jsonb) AS dependencies,
       coalesce((SELECT jsonb_agg(jsonb_build_object('target', 'mem-' || l.target_id::text,
                                                     'meaning', l.meaning) ORDER BY l.target_id)
                 FROM card_links l WHERE l.source_id = c.id), '[]'::jsonb) AS links,
       p.revision AS projected_revision, p.format AS projected_format,
       EXISTS (SELECT 1 FROM projection_ops o
               WHERE o.card_id = c.id AND o.status = 'failed') AS has_failed_op
FROM cards c
LEFT JOIN projections p ON p.card_id = c.id
WHERE c.id = ANY(%(ids)s);

-- name: cards_links_incoming
-- The links into a card, with each source's title, by source id.
SELECT 'mem-' || l.source_id::text AS source, c.title, l.meaning
FROM card_links l JOIN cards c ON c.id = l.source_id
WHERE l.target_id = %(card_id)s
ORDER BY l.source_id;

-- name: cards_family_counts
-- How many cards the workspace has per family.
SELECT family, count(*) AS n FROM cards GROUP BY family ORDER BY family;

-- ==== listing (shared/store/listing.py; the rest of a listing is composed there) ====
-- name: listing_text_matches
-- Cards of the workspace whose visible text (title, scope, concepts, content values: the
-- search_text column of migration 008, lower-cased by 015) matches an (escaped) ILIKE pattern,
-- case-insensitively; see migration 004 for why this is a function.
SELECT card_text_matches(%(pattern)s) AS id;

-- ==== verification: recall's verification rows (shared/store/verification.py) ====
-- name: verification_candidates
-- Verification rows for index hits: what the filters and the projection check need, and the
-- first %(per_card)s outgoing link targets in target-id order for expansion (DESIGN §5.3).
SELECT c.id, c.family, c.scope, c.concepts, c.revision,
       p.revision AS projected_revision, p.format AS projected_format,
       coalesce((SELECT array_agg(ARRAY[d.database_name, d.schema_name, d.table_name, d.column_name]
                                  ORDER BY d.ordinal)
                 FROM card_dependencies d WHERE d.card_id = c.id), '{}') AS dependencies,
       ARRAY(SELECT l.target_id FROM card_links l WHERE l.source_id = c.id
             ORDER BY l.target_id LIMIT %(per_card)s) AS links
FROM cards c
LEFT JOIN projections p ON p.card_id = c.id
WHERE c.id = ANY(%(ids)s);

-- ==== outbox: projection operations, recorded projections, locks (shared/store/outbox.py) ====
-- name: outbox_insert
-- Queue one projection operation (an upsert at a revision, or a delete); returns its id.
INSERT INTO projection_ops (workspace_id, card_id, op, revision)
VALUES (%(workspace)s, %(card_id)s, %(op)s, %(revision)s)
RETURNING id;

-- name: outbox_upsert_coalesced
-- An upsert at %(revision)s for a card, folded into the card's pending upsert when it has one
-- (queued earlier in the same transaction by migration 006's triggers, say): that operation
-- takes the new revision and a new updated_at (a projection in flight that read the card
-- before this change then leaves it pending: outbox_open_upserts). Returns the operation's id.
WITH folded AS (
    UPDATE projection_ops SET revision = %(revision)s, updated_at = clock_timestamp()
    WHERE id = (SELECT id FROM projection_ops
                WHERE card_id = %(card_id)s AND op = 'upsert' AND status = 'pending'
                ORDER BY id LIMIT 1 FOR UPDATE)
    RETURNING id
), inserted AS (
    INSERT INTO projection_ops (workspace_id, card_id, op, revision)
    SELECT %(workspace)s, %(card_id)s, 'upsert', %(revision)s
    WHERE NOT EXISTS (SELECT 1 FROM folded)
    RETURNING id
)
SELECT id FROM folded UNION ALL SELECT id FROM inserted;

-- name: outbox_insert_bulk
-- One pending upsert per card (bulk import), at the cards' current revision: inserted where the
-- card has none (the links of an import queue their targets through migration 006's triggers
-- first), else the pending one takes the card's revision and a new updated_at (so a projection
-- in flight that read the card before this import leaves it pending: outbox_open_upserts). The
-- ids of both, in id order.
WITH stamped AS (
    UPDATE projection_ops o SET revision = c.revision, updated_at = clock_timestamp()
    FROM cards c
    WHERE c.id = ANY(%(ids)s) AND o.card_id = c.id AND o.op = 'upsert' AND o.status = 'pending'
    RETURNING o.id, o.card_id
), inserted AS (
    INSERT INTO projection_ops (workspace_id, card_id, op, revision)
    SELECT %(workspace)s, c.id, 'upsert', c.revision
    FROM cards c
    WHERE c.id = ANY(%(ids)s) AND c.id NOT IN (SELECT card_id FROM stamped)
    ORDER BY c.id
    RETURNING id
)
SELECT id FROM inserted
UNION ALL
SELECT id FROM stamped
ORDER BY id;

-- name: outbox_claim
-- Lease the given operation, if still claimable (pending, or running with an expired lease),
-- plus, with %(batch)s, other claimable ones of the workspace in lease order (migration 023:
-- solved questions first), %(limit)s in all, skipping rows another worker is claiming. The
-- others are read in the order of projection_ops_lease_idx, which stops at the limit.
WITH given AS (
    SELECT id FROM projection_ops
    WHERE id = %(op_id)s AND workspace_id = %(workspace)s
      AND (status = 'pending' OR (status = 'running' AND lease_expires_at < now()))
    FOR UPDATE SKIP LOCKED
), others AS (
    SELECT id FROM projection_ops
    WHERE %(batch)s AND workspace_id = %(workspace)s AND id <> %(op_id)s
      AND (status = 'pending' OR (status = 'running' AND lease_expires_at < now()))
    ORDER BY lease_order, id
    LIMIT %(limit)s - (SELECT count(*) FROM given)
    FOR UPDATE SKIP LOCKED
)
UPDATE projection_ops o
SET status = 'running', attempts = o.attempts + 1, updated_at = now(),
    lease_expires_at = now() + make_interval(secs => %(lease_seconds)s)
WHERE o.id IN (SELECT id FROM given UNION ALL SELECT id FROM others)
RETURNING o.id, o.card_id, o.op, o.revision, o.attempts;

-- name: outbox_renew
-- Extend the leases a job still holds: each operation while it is running on the attempt the job
-- leased it with (a claim after an expiry counts one more attempt, so a lease another worker
-- took over is never extended). updated_at is left alone: migration 017's stamps use it.
UPDATE projection_ops o
SET lease_expires_at = now() + make_interval(secs => %(lease_seconds)s)
FROM unnest(%(ids)s::bigint[], %(attempts)s::integer[]) AS l(id, attempts)
WHERE o.id = l.id AND o.attempts = l.attempts AND o.status = 'running'
RETURNING o.id;

-- name: outbox_complete
-- Mark operations done (an operation done already keeps its completion time).
UPDATE projection_ops
SET status = 'done', completed_at = now(), updated_at = now(), lease_expires_at = NULL,
    last_error = NULL
WHERE id = ANY(%(ids)s) AND status <> 'done';

-- name: outbox_open_upserts
-- The open (or failed) upserts of cards about to be read for projection, each with its
-- updated_at: the projection completes only those still unchanged (outbox_supersede). A writer
-- that lets one of them carry its change stamps it (migration 017, outbox_upsert_coalesced,
-- outbox_insert_bulk), so a change committed after this read is never completed by that job.
SELECT id, updated_at FROM projection_ops
WHERE card_id = ANY(%(ids)s) AND status IN ('pending', 'failed') AND op = 'upsert'
ORDER BY id;

-- name: outbox_supersede
-- Open (or failed) upserts of a card at or below the revision just projected are complete:
-- those read before the card was, and unchanged since (`outbox_open_upserts`: id and updated_at),
-- or every one when `only_ids` is NULL (a rebuild's switch, which reads under the workspace lock).
UPDATE projection_ops
SET status = 'done', completed_at = now(), updated_at = now(), lease_expires_at = NULL
WHERE card_id = %(card_id)s AND status IN ('pending', 'failed') AND op = 'upsert'
  AND revision <= %(revision)s
  AND (%(only_ids)s::bigint[] IS NULL
       OR (id, updated_at) IN (SELECT * FROM unnest(%(only_ids)s::bigint[],
                                                    %(only_stamps)s::timestamptz[])));

-- name: outbox_supersede_deleted
-- Every open operation of a deleted card is complete once its point is gone (ids are never reused).
UPDATE projection_ops
SET status = 'done', completed_at = now(), updated_at = now(), lease_expires_at = NULL
WHERE card_id = %(card_id)s AND status IN ('pending', 'failed');

-- name: outbox_fail
-- Give leased operations back with their error: pending again, or failed after max_attempts.
UPDATE projection_ops
SET status = CASE WHEN attempts >= %(max_attempts)s THEN 'failed' ELSE 'pending' END,
    last_error = %(error)s, lease_expires_at = NULL, updated_at = now()
WHERE id = ANY(%(ids)s) AND status = 'running';

-- name: outbox_complete_deletes
-- A rebuilt collection holds current cards only: every open deletion is satisfied.
UPDATE projection_ops
SET status = 'done', completed_at = now(), updated_at = now(), lease_expires_at = NULL
WHERE op = 'delete' AND status IN ('pending', 'failed');

-- name: outbox_open_for_sweep
-- Claimable operations of a workspace (pending, or running with an expired lease), in lease
-- order (migration 023), as outbox_claim leases them.
SELECT id, attempts FROM projection_ops
WHERE workspace_id = %(workspace)s
  AND (status = 'pending' OR (status = 'running' AND lease_expires_at < now()))
ORDER BY lease_order, id
LIMIT %(limit)s;

-- name: outbox_open_for_card
-- Ids of a card's operations that are not done, oldest first.
SELECT id FROM projection_ops
WHERE card_id = %(card_id)s AND status <> 'done'
ORDER BY id;

-- name: outbox_reset_for_retry
-- Put a card's failed and pending operations back to pending (retry); returns their ids.
UPDATE projection_ops
SET status = 'pending', lease_expires_at = NULL, updated_at = now()
WHERE card_id = %(card_id)s AND status IN ('failed', 'pending')
RETURNING id;

-- name: outbox_pending_list
-- A page of the workspace's incomplete operations, oldest first, with each card's title.
SELECT o.id, 'mem-' || o.card_id::text AS card_id, o.op, o.revision, o.status, o.attempts,
       o.last_error, o.lease_expires_at, o.created_at, o.updated_at,
       extract(epoch FROM now() - o.created_at)::float8 AS age_seconds,
       c.title
FROM projection_ops o
LEFT JOIN cards c ON c.id = o.card_id
WHERE o.status <> 'done'
ORDER BY o.id
LIMIT %(limit)s OFFSET %(offset)s;

-- name: outbox_pending_count
-- How many operations of the workspace are not done.
SELECT count(*) AS n FROM projection_ops WHERE status <> 'done';

-- name: outbox_queue_summary
-- Every workspace's operations per status and lag bucket in one statement (the metrics' queue
-- figures, read at scrape time, through migration 022's definer function): count, age in
-- seconds of the oldest, and the sum of the done ones' lags; a workspace without operations has
-- one row with a NULL status. %(n)s and %(neg_bounds)s: see the function's comment.
SELECT workspace_id, status, bucket, n_ops AS n, oldest_seconds, lag_sum
FROM projection_queue_summary(%(n)s, %(neg_bounds)s::float8[]);

-- name: outbox_pending_list_for_card
-- A card's incomplete operations, oldest first, with their age in seconds.
SELECT id, op, revision, status, attempts, last_error, created_at,
       extract(epoch FROM now() - created_at)::float8 AS age_seconds
FROM projection_ops
WHERE card_id = %(card_id)s AND status <> 'done'
ORDER BY id;

-- name: outbox_sweep_workspaces
-- Workspaces with a claimable operation, across workspaces (a definer function).
SELECT workspace_id FROM workspaces_with_open_ops();

-- name: outbox_projection_record
-- Record the valid projection only if the card still has the revision that was projected.
INSERT INTO projections (workspace_id, card_id, revision, format, projected_at)
SELECT workspace_id, id, revision, %(format)s, now()
FROM cards WHERE id = %(card_id)s AND revision = %(revision)s
ON CONFLICT (card_id) DO UPDATE
SET revision = EXCLUDED.revision, format = EXCLUDED.format, projected_at = EXCLUDED.projected_at
RETURNING card_id;

-- name: outbox_projection_forget
-- A card whose point was removed (the privacy filter refused its current text) has no valid
-- projection any more.
DELETE FROM projections WHERE card_id = ANY(%(ids)s);

-- name: outbox_projection_forget_all
-- Every recorded projection of the workspace is void: its collection was lost.
DELETE FROM projections;

-- name: outbox_projection_any
-- Whether the workspace has any recorded projection (a collection held its points once).
SELECT EXISTS (SELECT 1 FROM projections) AS recorded;

-- name: outbox_projection_state
-- A card's revision with its recorded projection's revision and format (NULL: none).
SELECT c.revision, p.revision AS projected_revision, p.format AS projected_format
FROM cards c LEFT JOIN projections p ON p.card_id = c.id
WHERE c.id = %(card_id)s;

-- name: outbox_unindexed_count
-- How many of the workspace's cards wait for their index update (an open upsert: pending,
-- running or failed), read by every recall to say that its answer cannot include them yet; the
-- partial index on open operations keeps it cheap when the queue is empty.
SELECT count(DISTINCT card_id) AS n FROM projection_ops WHERE status <> 'done' AND op = 'upsert';

-- name: outbox_projection_counts
-- How many cards the workspace has, and how many have a current projection.
SELECT count(*) AS cards,
       count(*) FILTER (WHERE p.revision = c.revision AND p.format = %(format)s) AS current
FROM cards c LEFT JOIN projections p ON p.card_id = c.id;

-- name: outbox_projection_format_latest
-- The newest projection format a migration recorded.
SELECT max(format) AS format FROM projection_formats;

-- name: outbox_projection_lock_shared
-- Held by every projection job of a workspace; an index rebuild's switch takes it exclusively.
SELECT pg_advisory_xact_lock_shared(hashtextextended('memarc.projection:' || %(workspace)s, 0));

-- name: outbox_projection_lock_exclusive
-- The workspace's projection lock, exclusively (a rebuild's switch waits for the jobs).
SELECT pg_advisory_xact_lock(hashtextextended('memarc.projection:' || %(workspace)s, 0));

-- name: outbox_collection_creation_lock
-- Held by the projection job that creates a workspace's collection (its first projection), so
-- that two jobs never create two (a Qdrant server's alias would keep only one of them).
SELECT pg_advisory_xact_lock(hashtextextended('memarc.collection:' || %(workspace)s, 0));

-- name: outbox_card_projection_lock
-- One card's projection lock (taken in card order by a projection job: jobs never deadlock).
SELECT pg_advisory_xact_lock(hashtextextended('memarc.card:' || %(card_id)s::text, 0));

-- name: outbox_audit_cards
-- Every card with its recorded projection and whether an operation is still open for it.
SELECT c.id, c.revision, p.revision AS projected_revision, p.format AS projected_format,
       EXISTS (SELECT 1 FROM projection_ops o
               WHERE o.card_id = c.id AND o.status IN ('pending', 'running')) AS has_open_op
FROM cards c LEFT JOIN projections p ON p.card_id = c.id;

-- name: outbox_audit_open_deletes
-- Cards with a pending or running deletion (the audit expects no point for them).
SELECT DISTINCT card_id FROM projection_ops
WHERE op = 'delete' AND status IN ('pending', 'running');

-- ==== rebuilds: tracked index rebuilds (shared/store/rebuilds.py) ====
-- Columns are named, never `*`: a prepared statement's result type must not change when a column
-- is added under a running process (tests/test_schema_gone.py).
-- name: rebuilds_insert
-- Queue a rebuild of the workspace; returns its row.
INSERT INTO index_rebuilds (id, workspace_id, requested_by, shadow)
VALUES (%(id)s, %(workspace)s, %(actor)s, %(shadow)s)
RETURNING id, workspace_id, status, requested_by, total, done, collection, summary, error,
          lease_expires_at, created_at, started_at, finished_at, shadow;

-- name: rebuilds_claim
-- Lease a queued rebuild (or a running one whose lease expired); no row when it is taken.
UPDATE index_rebuilds
SET status = 'running', started_at = coalesce(started_at, now()), done = 0,
    lease_expires_at = now() + make_interval(secs => %(lease_seconds)s)
WHERE id = %(id)s AND (status = 'queued' OR (status = 'running' AND lease_expires_at < now()))
RETURNING id, workspace_id, status, requested_by, total, done, collection, summary, error,
          lease_expires_at, created_at, started_at, finished_at, shadow;

-- name: rebuilds_progress
-- Record how many cards a running rebuild wrote into its collection, and renew its lease.
UPDATE index_rebuilds
SET done = %(done)s, total = %(total)s, collection = %(collection)s,
    lease_expires_at = now() + make_interval(secs => %(lease_seconds)s)
WHERE id = %(id)s;

-- name: rebuilds_renew
-- A running rebuild's lease, renewed by its heartbeat (between progress records: the optimize
-- step and the catch-up passes record none).
UPDATE index_rebuilds
SET lease_expires_at = now() + make_interval(secs => %(lease_seconds)s)
WHERE id = %(id)s AND status = 'running';

-- name: rebuilds_finish
-- Close a rebuild as done (with its summary) or failed (with its error); returns its row.
UPDATE index_rebuilds
SET status = %(status)s, summary = %(summary)s, error = %(error)s, finished_at = now(),
    lease_expires_at = NULL
WHERE id = %(id)s
RETURNING id, workspace_id, status, requested_by, total, done, collection, summary, error,
          lease_expires_at, created_at, started_at, finished_at, shadow;

-- name: rebuilds_release
-- A rebuild interrupted by a graceful stop goes back to the queue (the sweep restarts it).
UPDATE index_rebuilds
SET status = 'queued', done = 0, collection = NULL, lease_expires_at = NULL
WHERE id = %(id)s AND status = 'running';

-- name: rebuilds_get
-- One rebuild of the workspace by id.
SELECT id, workspace_id, status, requested_by, total, done, collection, summary, error,
          lease_expires_at, created_at, started_at, finished_at, shadow
FROM index_rebuilds WHERE id = %(id)s;

-- name: rebuilds_latest
-- The workspace's most recently requested rebuild.
SELECT id, workspace_id, status, requested_by, total, done, collection, summary, error,
          lease_expires_at, created_at, started_at, finished_at, shadow
FROM index_rebuilds ORDER BY created_at DESC LIMIT 1;

-- name: rebuilds_sweep
-- Rebuilds to (re)start across workspaces (a definer function): queued, or running with an
-- expired lease (expired_lease: that lease, which makes the restart's job id).
SELECT workspace_id, rebuild_id, expired_lease FROM workspaces_with_open_rebuilds();

-- ==== activity: the activity log (shared/store/activity.py) ====
-- name: activity_insert
-- Append one activity record (who, verb, card, outcome; detail as JSON).
INSERT INTO activity (workspace_id, actor, verb, card_id, outcome, detail)
VALUES (%(workspace)s, %(actor)s, %(verb)s, %(card_id)s, %(outcome)s, %(detail)s);

-- name: activity_insert_projection_outcomes
-- One record per card of a projection that did not happen (%(cards)s, %(revisions)s and
-- %(messages)s side by side), unless the card's newest record already says the same thing (same
-- verb, outcome and revision): a worker retrying the same failure records it once, and an edit,
-- a retry or another outcome in between makes the next one recorded again. Returns the cards
-- recorded.
INSERT INTO activity (workspace_id, actor, verb, card_id, outcome, detail)
SELECT %(workspace)s, %(actor)s, %(verb)s, c.card_id, %(outcome)s,
       jsonb_build_object('revision', c.revision, 'message', c.message)
FROM unnest(%(cards)s::uuid[], %(revisions)s::bigint[], %(messages)s::text[])
     AS c(card_id, revision, message)
WHERE NOT EXISTS (
  SELECT 1
  FROM (SELECT a.verb, a.outcome, a.detail FROM activity a
        WHERE a.workspace_id = %(workspace)s AND a.card_id = c.card_id
        ORDER BY a.at DESC, a.id DESC LIMIT 1) AS newest
  WHERE newest.verb = %(verb)s AND newest.outcome = %(outcome)s
    AND coalesce(newest.detail ->> 'revision', '') = coalesce(c.revision::text, ''))
RETURNING card_id;

-- name: activity_list
-- A page of the workspace's activity records, newest first, filtered by verb, card, outcome.
SELECT a.id, a.at, a.actor, a.verb,
       CASE WHEN a.card_id IS NULL THEN NULL ELSE 'mem-' || a.card_id::text END AS card_id,
       a.outcome, a.detail
FROM activity a
WHERE (%(verb)s::text IS NULL OR a.verb = %(verb)s)
  AND (%(card_id)s::uuid IS NULL OR a.card_id = %(card_id)s)
  AND (%(outcome)s::text IS NULL OR starts_with(a.outcome, %(outcome)s))
ORDER BY a.at DESC, a.id DESC
LIMIT %(limit)s OFFSET %(offset)s;

-- name: activity_count
-- How many activity records match the filters of activity_list.
SELECT count(*) AS n FROM activity a
WHERE (%(verb)s::text IS NULL OR a.verb = %(verb)s)
  AND (%(card_id)s::uuid IS NULL OR a.card_id = %(card_id)s)
  AND (%(outcome)s::text IS NULL OR starts_with(a.outcome, %(outcome)s));

-- ==== authentication: API tokens (shared/store/authentication.py) ====
-- name: authentication_lookup
-- The token whose SHA-256 digest is %(digest)s (a definer function: no table access).
SELECT token_id, workspace_id, permissions, database_name, schema_name, expires_at, revoked_at
FROM authenticate_token(%(digest)s);

-- name: authentication_touch
-- Stamp a token's last use (at most once a minute, in the definer function).
SELECT touch_token(%(token_id)s);

-- ==== bootstrap (shared/store/bootstrap.py) ====
-- Run with the migrator credentials as role memarc_migrator.
-- name: bootstrap_workspaces_insert
-- Create a workspace; no row when it exists already.
INSERT INTO workspaces (id, language) VALUES (%(workspace)s, %(language)s)
ON CONFLICT (id) DO NOTHING
RETURNING id, language, created_at;

-- name: bootstrap_workspaces_get
-- The workspace row, or nothing when it does not exist.
SELECT id, language, created_at FROM workspaces WHERE id = %(workspace)s;

-- name: bootstrap_removals_pending
-- A removal of this workspace id whose index collection is not dropped yet (migration 013).
SELECT id, removed_at FROM workspace_removals
WHERE workspace = %(workspace)s AND index_status = 'pending'
ORDER BY id LIMIT 1;

-- name: bootstrap_workspaces_lock
-- `memarc workspace delete`: the workspace's write lock (what every write takes), with the
-- workspace set for row-level security, bounded by lock_timeout.
SELECT set_config('memarc.workspace', %(workspace)s, true),
       set_config('lock_timeout', %(lock_timeout)s, true),
       pg_advisory_xact_lock(hashtextextended('memarc.workspace:' || %(workspace)s, 0));

-- name: bootstrap_workspaces_get_for_update
-- The workspace row, locked until the transaction ends (its removal).
SELECT id, language, created_at FROM workspaces WHERE id = %(workspace)s FOR UPDATE;

-- name: bootstrap_workspaces_tables
-- Every table of the archive schema with a workspace_id column (what a workspace owns).
SELECT c.table_name FROM information_schema.columns c
JOIN information_schema.tables t USING (table_schema, table_name)
WHERE c.table_schema = current_schema() AND c.column_name = 'workspace_id'
  AND t.table_type = 'BASE TABLE'
ORDER BY c.table_name;

-- name: bootstrap_workspaces_delete
-- Delete the workspace row itself (its rows in other tables are deleted first).
DELETE FROM workspaces WHERE id = %(workspace)s;

-- name: bootstrap_removals_insert
-- Record a workspace's removal, its deleted rows and the login that removed it.
INSERT INTO workspace_removals (workspace, removed_by, deleted_rows)
VALUES (%(workspace)s, %(removed_by)s || ' (database login ' || session_user || ')', %(rows)s)
RETURNING id, workspace, removed_by, removed_at, deleted_rows, index_status;

-- name: bootstrap_removals_get
-- A workspace removal's record, with the state of its collection's drop.
SELECT id, workspace, removed_by, removed_at, deleted_rows, index_status, index_done_at,
       index_error
FROM workspace_removals WHERE id = %(id)s;

-- name: bootstrap_tokens_insert
-- Store a new API token (its SHA-256 digest only, never the secret).
INSERT INTO api_tokens (id, workspace_id, token_hash, permissions, database_name, schema_name,
                        label, expires_at)
VALUES (%(id)s, %(workspace)s, %(digest)s, %(permissions)s, %(database)s, %(schema)s,
        %(label)s, %(expires_at)s);

-- name: bootstrap_tokens_revoke
-- Revoke an active token by id; returns it (no row when unknown or revoked already).
UPDATE api_tokens SET revoked_at = now()
WHERE id = %(id)s AND revoked_at IS NULL
RETURNING id, workspace_id;

-- name: bootstrap_tokens_active
-- An active token (not revoked, not expired) by the digest of its secret, or no row.
SELECT id, workspace_id, permissions, database_name, schema_name, label FROM api_tokens
WHERE token_hash = %(digest)s AND revoked_at IS NULL
  AND (expires_at IS NULL OR expires_at > now());

-- name: bootstrap_tokens_revoke_labelled
-- Revoke the active tokens of a workspace carrying a label (a process's own previous tokens).
UPDATE api_tokens SET revoked_at = now()
WHERE workspace_id = %(workspace)s AND label = %(label)s AND revoked_at IS NULL
RETURNING id;

-- ==== sessions: proposals, review receipts, decisions (shared/store/sessions.py) ====
-- The session workflow (DESIGN §6).

-- name: sessions_proposals_for_session
-- The session's proposals in the order they were stored.
SELECT seq, key, kind, family, card_id, base_revision, reuse_card_id, proposal, digest,
       created_at, erased_at
FROM session_proposals
WHERE session_id = %(session_id)s
ORDER BY seq;

-- name: sessions_erase_card_proposals
-- Erasure of a deleted card's content (migration 013): the proposals that carried it (an update
-- of it, an addition that would reuse it, the proposal a review applied to it) keep their key,
-- kind, family, card ids and decisions; their content and its digest go.
UPDATE session_proposals p
SET proposal = jsonb_build_object('key', p.key, 'kind', p.kind,
                                  'decisions', coalesce(p.proposal -> 'decisions', '[]'::jsonb)),
    digest = '', erased_at = now()
WHERE p.erased_at IS NULL
  AND (p.card_id = %(card_id)s OR p.reuse_card_id = %(card_id)s
       OR EXISTS (SELECT 1 FROM review_receipts r,
                         jsonb_array_elements(r.result -> 'items') AS i(item)
                  WHERE r.session_id = p.session_id AND i.item ->> 'key' = p.key
                    AND i.item ->> 'card_id' = %(card_ref)s))
RETURNING p.session_id, p.key;

-- name: sessions_erase_card_receipts
-- The receipts' items of a deleted card keep ids, revision, action and family; the title goes.
UPDATE review_receipts r
SET result = jsonb_set(r.result, '{items}', (
        SELECT coalesce(jsonb_agg(CASE WHEN e.item ->> 'card_id' = %(card_ref)s
                                       THEN e.item || '{"title": "", "erased": true}'::jsonb
                                       ELSE e.item END ORDER BY e.n), '[]'::jsonb)
        FROM jsonb_array_elements(r.result -> 'items') WITH ORDINALITY AS e(item, n)))
WHERE r.result -> 'items' @> jsonb_build_array(jsonb_build_object('card_id', %(card_ref)s::text))
RETURNING r.review_id;

-- name: sessions_list
-- The workspace's sessions with proposals, latest proposal first: additions and updates, the
-- proposals still open (not covered by a review: a receipt covers the proposals up to its
-- `through`, all of them when it has none), the open updates that are stale (card deleted, or
-- moved past the revision drafted against), erased proposals, the first and last proposal time,
-- who proposed, and the latest review if any. status: open (some proposal open), reviewed (some
-- review), or all.
WITH latest AS (
    SELECT DISTINCT ON (session_id) session_id, review_id, outcome, reviewed_by, created_at
    FROM review_receipts
    ORDER BY session_id, created_at DESC, review_id DESC),
listed AS (
    SELECT p.session_id,
           count(*) FILTER (WHERE p.kind = 'addition') AS additions,
           count(*) FILTER (WHERE p.kind = 'update') AS updates,
           count(*) FILTER (WHERE NOT x.reviewed AND p.kind = 'update' AND p.erased_at IS NULL
                              AND (c.id IS NULL OR c.revision <> p.base_revision)) AS stale,
           count(*) FILTER (WHERE p.erased_at IS NOT NULL) AS erased,
           count(*) FILTER (WHERE NOT x.reviewed) AS open,
           min(p.created_at) AS first_proposed_at, max(p.created_at) AS last_proposed_at,
           array_agg(DISTINCT p.proposed_by ORDER BY p.proposed_by) AS proposed_by
    FROM session_proposals p
    CROSS JOIN LATERAL (
        SELECT EXISTS (SELECT 1 FROM review_receipts r
                       WHERE r.session_id = p.session_id
                         AND (r.result ->> 'through' IS NULL
                              OR p.seq <= (r.result ->> 'through')::bigint)) AS reviewed) x
    LEFT JOIN cards c ON c.id = p.card_id
    GROUP BY p.session_id)
SELECT l.*, r.review_id, r.outcome, r.reviewed_by, r.created_at AS reviewed_at
FROM listed l
LEFT JOIN latest r USING (session_id)
WHERE %(status)s = 'all' OR (%(status)s = 'open' AND l.open > 0)
   OR (%(status)s = 'reviewed' AND r.review_id IS NOT NULL)
ORDER BY l.last_proposed_at DESC, l.session_id
LIMIT %(limit)s;

-- name: sessions_proposals_count
-- How many proposals the session holds.
SELECT count(*) AS n FROM session_proposals WHERE session_id = %(session_id)s;

-- name: sessions_proposals_insert
-- Store one proposal of a session (as sent, with its digest).
INSERT INTO session_proposals (workspace_id, session_id, key, kind, family, card_id, base_revision,
                               reuse_card_id, proposal, digest, proposed_by)
VALUES (%(workspace)s, %(session_id)s, %(key)s, %(kind)s, %(family)s, %(card_id)s,
        %(base_revision)s, %(reuse_card_id)s, %(proposal)s, %(digest)s, %(actor)s);

-- name: sessions_cards_loose_content
-- For each (family, content) pair given (1-based ordinal i), every card of that family whose
-- normalised content (normalized_content(): whitespace collapsed, lower-cased) equals it, oldest
-- first: the candidates of the reuse rule (shared/workflow/rules.py decides which is the same
-- card, and which only a possible duplicate). One pass over the cards.
WITH wanted AS (
    SELECT u.i, u.f, normalized_content(u.c) AS norm
    FROM unnest(%(families)s::text[], %(contents)s::jsonb[]) WITH ORDINALITY AS u(f, c, i))
SELECT w.i, c.id
FROM wanted w
JOIN cards c ON c.family = w.f AND normalized_content(c.content) = w.norm
ORDER BY w.i, c.created_at, c.id;

-- name: sessions_receipts_get
-- The review receipt stored under a review id.
SELECT review_id, session_id, outcome, request_digest, result, created_at
FROM review_receipts WHERE review_id = %(review_id)s;

-- name: sessions_receipts_for_session
-- The receipts of the session's reviews, oldest first (migration 020: a review leaves the
-- proposals stored after its summary open, for a later review).
SELECT review_id, session_id, outcome, request_digest, result, created_at
FROM review_receipts WHERE session_id = %(session_id)s
ORDER BY created_at, review_id;

-- name: sessions_receipts_insert
-- Store a review receipt, keyed by the review id (the idempotency key).
INSERT INTO review_receipts (workspace_id, review_id, session_id, outcome, request_digest, result,
                             reviewed_by)
VALUES (%(workspace)s, %(review_id)s, %(session_id)s, %(outcome)s, %(digest)s, %(result)s,
        %(actor)s);

-- name: sessions_decisions_for_session
-- The cards decided in a session (migration 012), in the order they were decided (a request's
-- decisions in its order).
SELECT card_id, decision, decided_by, decided_at
FROM session_decisions
WHERE session_id = %(session_id)s
ORDER BY decided_at, seq;

-- name: sessions_decided_card_ids
-- The ids of the cards decided in a session: what recall in that session excludes (DESIGN §5).
SELECT card_id FROM session_decisions WHERE session_id = %(session_id)s ORDER BY card_id;

-- name: sessions_decisions_upsert
-- Record decisions of a session, one per card (parallel arrays); a card decided before takes
-- the new decision, its author and time.
INSERT INTO session_decisions (workspace_id, session_id, card_id, decision, decided_by)
SELECT %(workspace)s, %(session_id)s, u.card_id, u.decision, %(actor)s
FROM unnest(%(card_ids)s::uuid[], %(decisions)s::text[]) WITH ORDINALITY AS u(card_id, decision, i)
ORDER BY u.i
ON CONFLICT (workspace_id, session_id, card_id)
DO UPDATE SET decision = EXCLUDED.decision, decided_by = EXCLUDED.decided_by, decided_at = now();

-- ==== schema_changes: physical schema-change cleanup (shared/store/schema_changes.py) ====
-- DESIGN §7.

-- name: schema_changes_runs_get
-- A schema-change run by id.
SELECT run_id, database_name, schema_name, removed_tables, removed_columns, request_digest, status,
       deleted, errors, requested_by, recorded_at, completed_at, cards_deleted_at
FROM schema_change_runs WHERE run_id = %(run_id)s;

-- name: schema_changes_runs_get_for_update
-- A schema-change run by id, locked until the transaction ends.
SELECT run_id, database_name, schema_name, removed_tables, removed_columns, request_digest, status,
       deleted, errors, requested_by, recorded_at, completed_at, cards_deleted_at
FROM schema_change_runs WHERE run_id = %(run_id)s FOR UPDATE;

-- name: schema_changes_runs_list
-- The workspace's runs, newest first (`database`/`schema`: NULL for any, a token's binding), with
-- the number of runs that match in all.
SELECT run_id, database_name, schema_name, removed_tables, removed_columns, request_digest, status,
       deleted, errors, requested_by, recorded_at, completed_at, cards_deleted_at,
       count(*) OVER () AS total
FROM schema_change_runs
WHERE (%(database)s::text IS NULL OR database_name = %(database)s)
  AND (%(schema)s::text IS NULL OR schema_name = %(schema)s)
ORDER BY recorded_at DESC, run_id
LIMIT %(limit)s OFFSET %(offset)s;

-- name: schema_changes_runs_open_for_target
-- The run of a database/schema whose cleanup is still pending (at most one).
SELECT run_id FROM schema_change_runs
WHERE database_name = %(database)s AND schema_name = %(schema)s AND status = 'cleanup_pending';

-- name: schema_changes_runs_insert
-- Record a run with a pending cleanup phase and the removed objects as sent.
INSERT INTO schema_change_runs (workspace_id, run_id, database_name, schema_name, removed_tables,
                                removed_columns, request_digest, requested_by)
VALUES (%(workspace)s, %(run_id)s, %(database)s, %(schema)s, %(tables)s, %(columns)s,
        %(digest)s, %(actor)s)
RETURNING run_id, database_name, schema_name, removed_tables, removed_columns, request_digest, status,
          deleted, errors, requested_by, recorded_at, completed_at, cards_deleted_at;

-- name: schema_changes_runs_finish
-- The card-deletion phase's receipt; `cards_deleted`: it deleted every matching card (no errors).
UPDATE schema_change_runs
SET status = %(status)s, deleted = %(deleted)s, errors = %(errors)s,
    cards_deleted_at = CASE WHEN %(cards_deleted)s THEN coalesce(cards_deleted_at, now()) END,
    completed_at = CASE WHEN %(status)s = 'done' THEN now() END
WHERE run_id = %(run_id)s
RETURNING run_id, database_name, schema_name, removed_tables, removed_columns, request_digest, status,
          deleted, errors, requested_by, recorded_at, completed_at, cards_deleted_at;

-- name: schema_changes_runs_complete
-- A run whose cards and point deletions are all done (migration 013).
UPDATE schema_change_runs SET status = 'done', completed_at = now()
WHERE run_id = %(run_id)s AND status = 'cleanup_pending' AND cards_deleted_at IS NOT NULL
RETURNING run_id, database_name, schema_name, removed_tables, removed_columns, request_digest, status,
          deleted, errors, requested_by, recorded_at, completed_at, cards_deleted_at;

-- name: schema_changes_open_point_deletions
-- The cards among `ids` whose point deletion is not done yet (pending, running or failed).
SELECT DISTINCT card_id FROM projection_ops
WHERE op = 'delete' AND status <> 'done' AND card_id = ANY(%(ids)s)
ORDER BY card_id;

-- name: schema_changes_cards_matching
-- Cards with a dependency entry on a removed object of one database/schema: a removed table
-- covers the table entry and its columns; a removed column matches only that column's entries.
-- Database-only and schema-only entries never match (the database and schema still exist).
SELECT DISTINCT d.card_id
FROM card_dependencies d
WHERE d.database_name = %(database)s AND d.schema_name = %(schema)s
  AND d.table_name IS NOT NULL
  AND (d.table_name = ANY(%(tables)s)
       OR EXISTS (SELECT 1 FROM unnest(%(col_tables)s::text[], %(col_names)s::text[]) AS r(t, c)
                  WHERE d.table_name = r.t AND d.column_name = r.c))
ORDER BY d.card_id;

-- ==== admin_sessions: administration sessions in the browser (shared/store/admin_sessions.py, migration 018) ====
-- name: admin_sessions_insert
-- Open a browser session of a token (its secret's digest only).
INSERT INTO admin_sessions (id, workspace_id, secret_hash, token_id, expires_at)
VALUES (%(id)s, %(workspace)s, %(digest)s, %(token_id)s, %(expires_at)s);

-- name: admin_sessions_principal
-- A session with its token's permissions and state, by its secret's digest (any workspace).
SELECT session_id, workspace_id, token_id, permissions, database_name, schema_name, expires_at,
       ended_at, token_expires_at, revoked_at
FROM admin_session_principal(%(digest)s);

-- name: admin_sessions_end
-- End a session (sign-out).
UPDATE admin_sessions SET ended_at = now()
WHERE secret_hash = %(digest)s AND ended_at IS NULL;

-- name: admin_sessions_redeem_link
-- Redeem a one-time sign-in link once, through its definer function.
SELECT token_id, workspace_id, permissions, database_name, schema_name, expires_at, revoked_at
FROM admin_redeem_sign_in_link(%(digest)s);

-- name: admin_sessions_purge_ended
-- Delete, in every workspace, sessions ended and links used or expired more than `grace` seconds
-- ago, through their definer function (migration 021); the counts deleted.
SELECT sessions, links FROM admin_purge_ended(make_interval(secs => %(grace)s));

-- name: admin_sessions_insert_link
-- Bootstrap (migrator): a one-time sign-in link for a token of the workspace.
INSERT INTO admin_sign_in_links (code_hash, workspace_id, token_id, expires_at)
VALUES (%(digest)s, %(workspace)s, %(token_id)s, %(expires_at)s)
RETURNING created_at, expires_at;

-- ==== evaluations: recall evaluation cases and runs (shared/store/evaluations.py) ====
-- name: evaluations_solved_cards
-- Every solved question projected in the current format (%(format)s), with its question, the
-- databases its dependencies name, and its outgoing links' targets (projected ones only, with
-- their family): the derived cases' material (shared/evaluation/cases.py).
SELECT c.id, c.content ->> 'question' AS question,
       coalesce((SELECT array_agg(DISTINCT d.database_name ORDER BY d.database_name)
                 FROM card_dependencies d WHERE d.card_id = c.id), '{}') AS databases,
       coalesce((SELECT array_agg(l.target_id ORDER BY l.target_id)
                 FROM card_links l JOIN cards t ON t.id = l.target_id
                 JOIN projections tp ON tp.card_id = t.id AND tp.revision = t.revision
                      AND tp.format = %(format)s
                 WHERE l.source_id = c.id), '{}') AS targets,
       coalesce((SELECT array_agg(t.family ORDER BY l.target_id)
                 FROM card_links l JOIN cards t ON t.id = l.target_id
                 JOIN projections tp ON tp.card_id = t.id AND tp.revision = t.revision
                      AND tp.format = %(format)s
                 WHERE l.source_id = c.id), '{}') AS target_families
FROM cards c
JOIN projections p ON p.card_id = c.id AND p.revision = c.revision AND p.format = %(format)s
WHERE c.family = 'solved_question' AND coalesce(c.content ->> 'question', '') <> ''
ORDER BY c.id;

-- name: evaluations_title_cards
-- A sample of at most %(limit)s cards other than solved questions, projected in the current format
-- (%(format)s), in an order stable across imports (md5 of the title): each with its family, its title and the ids of
-- every projected card of those families with the same title (itself included), the derived
-- ``title`` cases' material (shared/evaluation/cases.py).
SELECT c.id, c.family, c.title,
       (SELECT array_agg(o.id ORDER BY o.id) FROM cards o
        JOIN projections op ON op.card_id = o.id AND op.revision = o.revision
             AND op.format = %(format)s
        WHERE o.title = c.title AND o.family <> 'solved_question') AS same_title
FROM cards c
JOIN projections p ON p.card_id = c.id AND p.revision = c.revision AND p.format = %(format)s
WHERE c.family <> 'solved_question'
ORDER BY md5(c.title), c.id
LIMIT %(limit)s;

-- name: evaluations_projected
-- Which of %(ids)s are cards projected at their revision in the current format (%(format)s).
SELECT c.id FROM cards c
JOIN projections p ON p.card_id = c.id AND p.revision = c.revision AND p.format = %(format)s
WHERE c.id = ANY(%(ids)s);

-- name: evaluations_cases
-- The workspace's curated cases, oldest first.
SELECT id, question, mode, filters, expected, match, note, created_by, created_at, updated_at
FROM eval_cases ORDER BY created_at, id;

-- name: evaluations_case_get
-- One curated case, or nothing.
SELECT id, question, mode, filters, expected, match, note, created_by, created_at, updated_at
FROM eval_cases WHERE id = %(id)s;

-- name: evaluations_case_insert
-- A curated case; returns its row. ON CONFLICT: an import that names an existing id replaces it.
INSERT INTO eval_cases (id, workspace_id, question, mode, filters, expected, match, note,
                        created_by)
VALUES (%(id)s, %(workspace)s, %(question)s, %(mode)s, %(filters)s, %(expected)s, %(match)s,
        %(note)s, %(actor)s)
ON CONFLICT (id) DO UPDATE SET question = EXCLUDED.question, mode = EXCLUDED.mode,
    filters = EXCLUDED.filters, expected = EXCLUDED.expected, match = EXCLUDED.match,
    note = EXCLUDED.note, updated_at = now()
WHERE eval_cases.workspace_id = EXCLUDED.workspace_id
RETURNING id, question, mode, filters, expected, match, note, created_by, created_at, updated_at;

-- name: evaluations_case_update
-- Replace a curated case's fields; returns its row, nothing when there is no such case.
UPDATE eval_cases SET question = %(question)s, mode = %(mode)s, filters = %(filters)s,
    expected = %(expected)s, match = %(match)s, note = %(note)s, updated_at = now()
WHERE id = %(id)s
RETURNING id, question, mode, filters, expected, match, note, created_by, created_at, updated_at;

-- name: evaluations_case_delete
-- Delete a curated case; returns its id, nothing when there was none.
DELETE FROM eval_cases WHERE id = %(id)s RETURNING id;

-- name: evaluations_run_insert
-- Queue a run; nothing when one of this workspace is already queued or running (the unique
-- index; the caller runs it in a savepoint).
INSERT INTO eval_runs (id, workspace_id, trigger, requested_by)
VALUES (%(id)s, %(workspace)s, %(trigger)s, %(actor)s)
RETURNING id, status, trigger, requested_by, created_at;

-- name: evaluations_run_claim
-- Lease a queued run (or a running one whose lease expired) for %(lease_seconds)s seconds.
UPDATE eval_runs SET status = 'running', started_at = now(), done = 0,
    lease_expires_at = now() + make_interval(secs => %(lease_seconds)s)
WHERE id = %(id)s AND (status = 'queued' OR (status = 'running' AND lease_expires_at < now()))
RETURNING id, trigger, requested_by;

-- name: evaluations_run_progress
-- Record %(done)s of %(total)s cases recalled and renew the lease.
UPDATE eval_runs SET done = %(done)s, total = %(total)s,
    lease_expires_at = now() + make_interval(secs => %(lease_seconds)s)
WHERE id = %(id)s AND status = 'running';

-- name: evaluations_run_finish
-- Close a run as done (with what it measured) or failed (with its error).
UPDATE eval_runs SET status = %(status)s, finished_at = now(), lease_expires_at = NULL,
    done = coalesce(%(done)s, done), total = coalesce(%(total)s, total),
    fingerprint = %(fingerprint)s, format = %(format)s, profiles = %(profiles)s,
    profile_digest = %(profile_digest)s, figures = %(figures)s, misses = %(misses)s,
    outcomes = %(outcomes)s, compared_with = %(compared_with)s, regressions = %(regressions)s,
    regression = %(regression)s, seconds = %(seconds)s, error = %(error)s,
    candidate = %(candidate)s
WHERE id = %(id)s
RETURNING id;

-- name: evaluations_run_get
-- One run with its figures and misses (not its per-case outcomes).
SELECT id, status, trigger, requested_by, created_at, started_at, finished_at, done, total,
       fingerprint, format, profiles, profile_digest, figures, misses, compared_with,
       regressions, regression, seconds, error, candidate
FROM eval_runs WHERE id = %(id)s;

-- name: evaluations_run_outcomes
-- One finished run's per-case outcomes (a shadow candidate's base: its baseline run).
SELECT id, outcomes, figures FROM eval_runs
WHERE id = %(id)s AND status = 'done' AND outcomes IS NOT NULL;

-- name: evaluations_runs
-- Runs newest first, without their misses and outcomes (the history).
SELECT id, status, trigger, requested_by, created_at, started_at, finished_at, done, total,
       fingerprint, format, profiles, profile_digest, figures, NULL::jsonb AS misses,
       compared_with, regressions, regression, seconds, error, candidate
FROM eval_runs ORDER BY created_at DESC, id DESC LIMIT %(limit)s OFFSET %(offset)s;

-- name: evaluations_runs_count
-- How many runs the workspace has.
SELECT count(*) AS total FROM eval_runs;

-- name: evaluations_previous_done
-- The newest finished run before %(id)s, with its per-case outcomes (the comparison's base); a
-- shadow rebuild's candidate run is never one (it did not recall from the serving index).
SELECT id, outcomes, figures FROM eval_runs
WHERE status = 'done' AND id <> %(id)s AND outcomes IS NOT NULL AND candidate IS NULL
ORDER BY finished_at DESC, id DESC LIMIT 1;

-- name: evaluations_states
-- Per workspace, what decides whether an evaluation is due (the sweep; definer function).
SELECT * FROM evaluation_states();

-- name: evaluations_latest
-- The latest finished run's figures of every workspace and its count of regressions (metrics).
SELECT * FROM evaluation_latest();

-- name: evaluations_latest_done
-- The workspace's newest finished run: when, its figures, whether it regressed (the explorer).
SELECT id, finished_at, figures, regression FROM eval_runs
WHERE status = 'done' AND candidate IS NULL ORDER BY finished_at DESC, id DESC LIMIT 1;

-- name: evaluations_run_release
-- Put a running run back in the queue (its worker is stopping): the next sweep offers it again.
UPDATE eval_runs SET status = 'queued', started_at = NULL, lease_expires_at = NULL, done = 0
WHERE id = %(id)s AND status = 'running';

-- name: evaluations_export
-- The curated cases as cards-file lines, oldest first: each with its expected cards by their
-- keys (card_key: the import key, else mem-<id>), in the case's order; a deleted card is left out.
SELECT e.id, e.question, e.mode, e.filters, e.match, e.note,
       coalesce((SELECT array_agg(card_key(c.import_key, c.id) ORDER BY x.ord)
                 FROM unnest(e.expected) WITH ORDINALITY AS x(card_id, ord)
                 JOIN cards c ON c.id = x.card_id), '{}') AS expected
FROM eval_cases e ORDER BY e.created_at, e.id;

-- name: evaluations_case_exists
-- Whether %(id)s is one of this workspace's curated cases.
SELECT 1 AS found FROM eval_cases WHERE id = %(id)s;

-- name: evaluations_floors
-- The similarity floors of the workspace's newest finished run in projection format %(format)s
-- (not a shadow candidate's) with the fingerprint it ran with: what recall marks results against
-- (shared/recall/floor.py). Walks eval_runs_recent backwards.
SELECT fingerprint, figures -> 'floors' AS floors FROM eval_runs
WHERE status = 'done' AND candidate IS NULL AND format = %(format)s
ORDER BY created_at DESC, id DESC LIMIT 1;

-- ==== recall_records: one record per recall (shared/store/recall_records.py, migration 026) ====
-- name: recall_records_insert
-- Record one recall of the workspace (the runtime role may insert, never read or change, these).
INSERT INTO recall_records (id, workspace_id, actor, session_id, mode, top, families, filters,
                            query_text, query_digest, card_ids, scores, excluded, timings)
VALUES (%(id)s, %(workspace)s, %(actor)s, %(session)s, %(mode)s, %(top)s, %(families)s,
        %(filters)s, %(query_text)s, %(query_digest)s, %(card_ids)s, %(scores)s, %(excluded)s,
        %(timings)s);

-- name: recall_records_async_commit
-- A record's transaction commits without waiting for its WAL to reach the disk: a record is a
-- usage trace, and a crash within the WAL writer's delay (200 ms by default) may lose the last
-- few; the recall it describes does not wait for an fsync.
SET LOCAL synchronous_commit TO off;

-- name: recall_records_purge
-- Delete, in every workspace, at most %(batch)s records older than %(days)s days, oldest first,
-- through their definer function; how many.
SELECT recall_records_purge(make_interval(days => %(days)s), %(batch)s) AS purged;

-- ==== feedback: verdicts on recalled cards (shared/store/feedback.py, migration 027) ====
-- name: feedback_recall_get
-- One recall record of the workspace (row-level security: another workspace's is not found).
SELECT id, actor, session_id, mode, top, families, filters, query_text, query_digest,
       card_ids, scores, excluded, timings, created_at
FROM recall_records WHERE id = %(id)s;

-- name: feedback_recall_lock
-- Serialise feedback on one recall by one principal (two identical requests at once: one
-- inserts, the other sees its rows), until the transaction ends.
SELECT pg_advisory_xact_lock(hashtextextended('memarc.feedback:' || %(id)s::text || ':'
                                              || %(actor)s, 0));

-- name: feedback_of_actor
-- A principal's verdicts on one recall, by card.
SELECT card_id, verdict, note FROM recall_feedback
WHERE recall_id = %(id)s AND actor = %(actor)s;

-- name: feedback_upsert
-- Store a principal's verdicts on cards of one recall (arrays side by side); a card it already
-- judged on this recall gets the new verdict, note and surface, and a new updated_at only when
-- the verdict or note changed.
INSERT INTO recall_feedback AS f (workspace_id, recall_id, card_id, actor, verdict, note, via,
                                  review_id)
SELECT %(workspace)s, %(id)s, c.card_id, %(actor)s, c.verdict, c.note, %(via)s, %(review_id)s
FROM unnest(%(cards)s::uuid[], %(verdicts)s::text[], %(notes)s::text[])
     AS c (card_id, verdict, note)
ON CONFLICT (recall_id, card_id, actor) DO UPDATE
SET verdict = EXCLUDED.verdict, note = EXCLUDED.note, via = EXCLUDED.via,
    updated_at = CASE WHEN (f.verdict, f.note) IS DISTINCT FROM (EXCLUDED.verdict, EXCLUDED.note)
                      THEN now() ELSE f.updated_at END
RETURNING card_id, actor, verdict, note, via, review_id, created_at, updated_at;

-- name: feedback_review_helpful
-- A review's implicit feedback: `helpful` from the reviewer for each card of %(cards)s on the
-- session's newest recall that returned it; a verdict the reviewer already gave on that recall
-- and card stays. The cards recorded.
INSERT INTO recall_feedback (workspace_id, recall_id, card_id, actor, verdict, via, review_id)
SELECT DISTINCT ON (c.card_id) %(workspace)s, r.id, c.card_id, %(actor)s, 'helpful', 'review',
       %(review_id)s
FROM recall_records r CROSS JOIN LATERAL unnest(r.card_ids) AS c (card_id)
WHERE r.session_id = %(session)s AND c.card_id = ANY(%(cards)s::uuid[])
ORDER BY c.card_id, r.created_at DESC
ON CONFLICT (recall_id, card_id, actor) DO NOTHING
RETURNING card_id, recall_id;

-- name: feedback_of_recall
-- Every verdict on one recall, by card then newest first.
SELECT card_id, actor, verdict, note, via, review_id, created_at, updated_at
FROM recall_feedback WHERE recall_id = %(id)s
ORDER BY card_id, updated_at DESC, actor;

-- name: feedback_card_counts
-- How many verdicts of each kind a card has (within the records' retention).
SELECT verdict, count(*)::int AS n FROM recall_feedback
WHERE card_id = %(card_id)s GROUP BY verdict;

-- name: feedback_card_recent
-- A card's newest verdicts with the question of the recall each was given on.
SELECT f.recall_id, f.actor, f.verdict, f.note, f.via, f.review_id, f.created_at, f.updated_at,
       r.query_text, r.mode
FROM recall_feedback f JOIN recall_records r ON r.id = f.recall_id
WHERE f.card_id = %(card_id)s
ORDER BY f.updated_at DESC, f.actor LIMIT %(limit)s;

-- name: feedback_recalls_page
-- A page of the workspace's recall records, newest first, with how many verdicts each has.
SELECT r.id, r.actor, r.session_id, r.mode, r.query_text, cardinality(r.card_ids) AS results,
       r.created_at,
       (SELECT count(*) FROM recall_feedback f WHERE f.recall_id = r.id)::int AS verdicts
FROM recall_records r
WHERE (%(actor)s::text IS NULL OR r.actor = %(actor)s)
  AND (%(mode)s::text IS NULL OR r.mode = %(mode)s)
ORDER BY r.created_at DESC, r.id LIMIT %(limit)s OFFSET %(offset)s;

-- name: feedback_recalls_count
-- How many recall records the workspace holds (with the page's filters).
SELECT count(*)::int AS n FROM recall_records
WHERE (%(actor)s::text IS NULL OR actor = %(actor)s)
  AND (%(mode)s::text IS NULL OR mode = %(mode)s);

-- ==== reports: the curation reports (shared/store/reports.py; the filters are composed there) ====
-- name: reports_conflict_cards
-- Every card of the families in %(families)s that has a current projection (the index can
-- compare it): id, family, scope and revision, and the objects its dependencies name, each to
-- the table (`database`, `database.schema`, `database.schema.table` or `database.table`: the
-- levels given, the column left out), for the conflicts report.
SELECT c.id, c.family, c.scope, c.revision,
       coalesce((SELECT array_agg(DISTINCT concat_ws('.', d.database_name, d.schema_name,
                                                     d.table_name))
                 FROM card_dependencies d WHERE d.card_id = c.id), '{}') AS tables
FROM cards c JOIN projections p ON p.card_id = c.id AND p.revision = c.revision
WHERE c.family = ANY(%(families)s);

-- name: reports_state
-- What the conflicts report's answer depends on: the number of cards and of projections, and
-- the latest change of either (a cached report is reused while these are unchanged).
SELECT (SELECT count(*) FROM cards) AS cards, (SELECT max(updated_at) FROM cards) AS updated,
       (SELECT count(*) FROM projections) AS projected,
       (SELECT max(projected_at) FROM projections) AS projected_at;

-- name: reports_never_recalled
-- A page of the cards (filters composed into {cond}, over cards c) that no recall record of the
-- last %(days)s days returned, with the newest record that returned each at all, sorted by
-- {order}; `total` is the count of every such card (the page's rows all carry it).
WITH hits AS (
    SELECT x.card_id, max(r.created_at) AS last_recalled,
           count(*) FILTER (WHERE r.created_at >= now() - make_interval(days => %(days)s)) AS recalls
    FROM recall_records r, unnest(r.card_ids) AS x(card_id) GROUP BY 1)
SELECT c.id, c.family, c.title, c.created_at, h.last_recalled, coalesce(h.recalls, 0) AS recalls,
       count(*) OVER () AS total
FROM cards c LEFT JOIN hits h ON h.card_id = c.id
WHERE coalesce(h.recalls, 0) = 0 AND {cond}
ORDER BY {order} LIMIT %(limit)s OFFSET %(offset)s;

-- name: reports_unhelpful
-- A page of the cards (filters in {cond}) with at least %(min_feedback)s not_helpful or wrong
-- verdicts on the recall records of the last %(days)s days: how many of those records returned
-- each card, and the verdicts on them by kind, sorted by {order}; `total` as above.
WITH win AS (
    SELECT id, card_ids FROM recall_records
    WHERE created_at >= now() - make_interval(days => %(days)s)),
r AS (SELECT x.card_id, count(*) AS recalls FROM win, unnest(win.card_ids) AS x(card_id) GROUP BY 1),
f AS (SELECT fb.card_id, count(*) FILTER (WHERE fb.verdict = 'helpful') AS helpful,
             count(*) FILTER (WHERE fb.verdict = 'not_helpful') AS not_helpful,
             count(*) FILTER (WHERE fb.verdict = 'wrong') AS wrong
      FROM recall_feedback fb JOIN win ON win.id = fb.recall_id GROUP BY 1)
SELECT c.id, c.family, c.title, c.created_at, coalesce(r.recalls, 0) AS recalls,
       f.helpful, f.not_helpful, f.wrong, count(*) OVER () AS total
FROM cards c JOIN f ON f.card_id = c.id LEFT JOIN r ON r.card_id = c.id
WHERE f.not_helpful + f.wrong >= %(min_feedback)s AND {cond}
ORDER BY {order} LIMIT %(limit)s OFFSET %(offset)s;

-- name: reports_matching_cards
-- Ids of the cards matching the filters composed into {cond} (over cards c).
SELECT c.id FROM cards c WHERE {cond};

-- name: reports_stale_dependencies
-- A page of the tables (database.schema.table) that the dependencies of the cards matching the
-- filters composed into {cond} name, that nothing of the last %(days)s days showed in use: no
-- recall record of the window named the table in its filters or returned a card that depends on
-- it, and no schema-change run of the window covered its schema without removing it. Each with
-- the cards that name it (how many, and the first three by title), the newest sign of use at
-- all (`last_seen`, `seen_by`: filter, result or schema_run; NULL: none kept), sorted by
-- {order}; `total` is the count of every such table.
WITH deps AS (
    SELECT lower(d.database_name) AS db, lower(d.schema_name) AS sch, lower(d.table_name) AS tbl,
           min(d.database_name) AS database_name, min(d.schema_name) AS schema_name,
           min(d.table_name) AS table_name, c.id, c.title
    FROM card_dependencies d JOIN cards c ON c.id = d.card_id
    WHERE d.table_name IS NOT NULL AND {cond}
    GROUP BY 1, 2, 3, c.id, c.title),
tables AS (
    SELECT db, sch, tbl, min(database_name) AS database_name, min(schema_name) AS schema_name,
           min(table_name) AS table_name, count(*) AS cards,
           (array_agg(jsonb_build_object('id', id, 'title', title)
                      ORDER BY lower(title), id))[1:3] AS examples
    FROM deps GROUP BY 1, 2, 3),
signs AS (
    SELECT lower(r.filters->>'database') AS db, lower(r.filters->>'schema') AS sch,
           lower(r.filters->>'table') AS tbl, r.created_at AS at, 'filter' AS how
    FROM recall_records r WHERE r.filters ? 'table'
    UNION ALL
    SELECT lower(d.database_name), lower(d.schema_name), lower(d.table_name), h.at, 'result'
    FROM (SELECT x.card_id, max(r.created_at) AS at
          FROM recall_records r CROSS JOIN LATERAL unnest(r.card_ids) AS x (card_id)
          GROUP BY x.card_id) AS h
    JOIN card_dependencies d ON d.card_id = h.card_id AND d.table_name IS NOT NULL
    UNION ALL
    SELECT lower(s.database_name), lower(s.schema_name), t.tbl, s.recorded_at, 'schema_run'
    FROM schema_change_runs s CROSS JOIN tables t
    WHERE t.db = lower(s.database_name) AND t.sch = lower(s.schema_name)
      AND NOT t.tbl = ANY (SELECT lower(x) FROM unnest(s.removed_tables) AS x)),
seen AS (
    SELECT DISTINCT ON (t.db, t.sch, t.tbl) t.db, t.sch, t.tbl, s.at, s.how
    FROM tables t JOIN signs s
      ON s.tbl = t.tbl AND (s.db IS NULL OR s.db = t.db) AND (s.sch IS NULL OR s.sch = t.sch)
    ORDER BY t.db, t.sch, t.tbl, s.at DESC)
SELECT t.database_name, t.schema_name, t.table_name, t.cards, t.examples,
       seen.at AS last_seen, seen.how AS seen_by, count(*) OVER () AS total
FROM tables t LEFT JOIN seen USING (db, sch, tbl)
WHERE seen.at IS NULL OR seen.at < now() - make_interval(days => %(days)s)
ORDER BY {order} LIMIT %(limit)s OFFSET %(offset)s;
