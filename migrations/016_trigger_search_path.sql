-- The requeue functions of migration 006 (the link and question triggers that queue a
-- clarification's or rule's re-projection) name their tables unqualified and so resolved them
-- through the caller's search_path: the archive's own connections set it, any other session
-- writing cards or links (psql, a bulk load) got `relation "cards" does not exist` and its write
-- failed. They now carry the archive schema's search_path themselves, as the SECURITY DEFINER
-- functions of 001 already do (FROM CURRENT: the migration runs with it set to this schema).
ALTER FUNCTION requeue_expanded_cards(uuid[]) SET search_path FROM CURRENT;
ALTER FUNCTION card_links_requeue_inserted() SET search_path FROM CURRENT;
ALTER FUNCTION card_links_requeue_deleted() SET search_path FROM CURRENT;
ALTER FUNCTION cards_requeue_question_targets() SET search_path FROM CURRENT;
