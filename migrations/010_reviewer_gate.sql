-- 010: the reviewer gate (issue 16, DESIGN §6): an agent that proposes must not apply its own
-- proposals.
--
-- Until now `memory.review` allowed a session's proposals, its summary, its review and its
-- solved-index. From this version on, proposing needs `memory.propose`, applying a review and
-- solved-index need `memory.review`, and the summary either one. Nothing the project creates
-- holds both; an administrator may still create such a token explicitly (with a warning).
--
-- A token created before this version with `memory.review` was issued to do all four. It keeps
-- doing all four: `memory.propose` is added to every active (not revoked) token holding
-- `memory.review`, so no deployed agent or reviewer breaks on upgrade, and the permissions the
-- token shows are the ones it really has. The gate is then open for these tokens only, and the
-- NOTICE below counts them: replace each with a proposing and a reviewing token and revoke it
-- (README, "Upgrading to the reviewer gate"). Revoked tokens are left as they were revoked.
-- Idempotent: a token already holding `memory.propose` is not touched.
SET LOCAL ROLE memarc_migrator;

DO $$
DECLARE
    n integer;
BEGIN
    UPDATE api_tokens
       SET permissions = ARRAY(SELECT p FROM unnest(permissions || 'memory.propose'::text) AS p
                               ORDER BY p COLLATE "C")  -- sorted, as create_token stores them
     WHERE revoked_at IS NULL
       AND 'memory.review' = ANY (permissions)
       AND NOT 'memory.propose' = ANY (permissions);
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN
        RAISE NOTICE '% token(s) holding memory.review now hold memory.propose too (they did both before): replace each with a memory.propose and a memory.review token, then revoke it', n;
    END IF;
END
$$;
