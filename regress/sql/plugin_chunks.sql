-- plugin_chunks: a transaction with more than chunk_changes changes is written as Chunks (in
-- order, each at most chunk_changes changes), then a Manifest listing them with the totals, then
-- a CommitMarker whose totals match; a transaction with at most chunk_changes changes is one
-- Envelope. All records of a transaction carry the same identity.
\set VERBOSITY terse
CREATE EXTENSION trellara;

CREATE FUNCTION pg_temp.records(slot name, VARIADIC options text[])
RETURNS TABLE (n bigint, lsn pg_lsn, j jsonb) LANGUAGE sql AS $$
  SELECT r.n, r.lsn, trellara.envelope_json(r.data)
    FROM pg_logical_slot_get_binary_changes(slot, NULL, NULL, VARIADIC options)
         WITH ORDINALITY AS r(lsn, xid, data, n)
   ORDER BY r.n
$$;

CREATE TABLE chunked (id int PRIMARY KEY, v text);
CREATE TABLE chunked_other (id int PRIMARY KEY);
CREATE PUBLICATION regress_chunks_pub FOR TABLE chunked, chunked_other;
SELECT 'init' FROM pg_create_logical_replication_slot('regress_chunks', 'trellara');

-- 10 changes (5 inserts, 2 updates, 1 insert elsewhere, 1 delete, 1 message) with
-- chunk_changes = 3: chunks of 3, 3, 3 and 1, a manifest, a commit marker.
BEGIN;
INSERT INTO chunked SELECT i, 'row ' || i FROM generate_series(1, 5) i;
UPDATE chunked SET v = 'updated' WHERE id <= 2;
INSERT INTO chunked_other VALUES (1);
DELETE FROM chunked WHERE id = 5;
SELECT 'emitted' FROM pg_logical_emit_message(true, 'regress.chunks', 'last change');
COMMIT;
-- Exactly chunk_changes changes: one envelope.
INSERT INTO chunked VALUES (7, 'a'), (8, 'b'), (9, 'c');
CREATE TEMP TABLE recs AS SELECT * FROM pg_temp.records('regress_chunks', 'publication', 'regress_chunks_pub', 'chunk_changes', '3');
SELECT n, j->>'type' AS type, j->'seq' AS seq, j->'event_count' AS event_count,
       jsonb_array_length(j->'changes') AS changes, j->'total_changes' AS total_changes,
       j->'total_chunks' AS total_chunks, j->>'boundary_mode' AS boundary_mode, j->>'checksum_status' AS checksum_status
  FROM recs ORDER BY n;
-- The changes of the chunks, in order: together they are the transaction.
SELECT n, (j->'seq')::int AS seq, c->>'op' AS op, c->>'relation' AS relation, c->'new' AS new, c->'old' AS old
  FROM recs, jsonb_array_elements(j->'changes') WITH ORDINALITY x(c, i)
 WHERE j->>'type' = 'chunk' ORDER BY n, i;
-- The manifest lists the chunks (seq and event count, checksums equal to the chunks'), the
-- counts per relation, and describes every relation; the commit marker's totals match it.
SELECT (SELECT jsonb_agg(jsonb_build_object('seq', c->'seq', 'event_count', c->'event_count')) FROM jsonb_array_elements(m.j->'chunks') c) AS chunks,
       (SELECT bool_and(c->>'checksum' = (SELECT k.j->>'checksum' FROM recs k WHERE k.j->>'type' = 'chunk' AND k.j->'seq' = c->'seq'))
          FROM jsonb_array_elements(m.j->'chunks') c) AS chunk_checksums_match,
       m.j->'counts' AS counts,
       (SELECT jsonb_agg(r->>'name') FROM jsonb_array_elements(m.j->'relations') r) AS relations
  FROM recs m WHERE m.j->>'type' = 'manifest';
SELECT k.j->'total_changes' = m.j->'total_changes' AS total_changes_match,
       (k.j->'total_chunks')::int = jsonb_array_length(m.j->'chunks') AS total_chunks_match
  FROM recs k, recs m WHERE k.j->>'type' = 'commit_marker' AND m.j->>'type' = 'manifest';
-- One identity for all records of the chunked transaction; its commit_lsn is the LSN reported
-- for the commit marker (the record that completes the transaction).
SELECT count(DISTINCT j->'tx') AS identities, count(*) AS records,
       bool_and((j->'tx'->>'commit_lsn')::pg_lsn = (SELECT lsn FROM recs WHERE j->>'type' = 'commit_marker')) AS commit_lsn_is_marker_lsn
  FROM recs WHERE j->>'type' <> 'envelope';

-- A relation whose schema changes inside a large transaction closes the chunk, so that each
-- record describes the relation once, as it was for those changes.
BEGIN;
INSERT INTO chunked VALUES (10, 'before');
ALTER TABLE chunked ADD COLUMN extra int;
INSERT INTO chunked VALUES (11, 'after', 11);
INSERT INTO chunked VALUES (12, 'after', 12);
COMMIT;
SELECT n, j->>'type' AS type, j->'seq' AS seq,
       (SELECT jsonb_agg(c->'new') FROM jsonb_array_elements(j->'changes') c) AS rows,
       (SELECT jsonb_agg(c->>'name') FROM jsonb_array_elements(j->'relations'->0->'columns') c) AS columns
  FROM pg_temp.records('regress_chunks', 'publication', 'regress_chunks_pub', 'chunk_changes', '3') ORDER BY n;

-- Chunks are bounded by bytes too (chunk_bytes): with 64 KiB and rows of 40 000 bytes, each chunk
-- holds one row; a row above the bound travels alone (100 000 bytes); a transaction of small rows
-- within both bounds stays one envelope.
BEGIN;
INSERT INTO chunked SELECT i, repeat('x', 40000) FROM generate_series(20, 22) i;
INSERT INTO chunked VALUES (23, repeat('y', 100000)), (24, 'small');
COMMIT;
INSERT INTO chunked VALUES (25, 'a'), (26, 'b');
SELECT n, j->>'type' AS type, j->'seq' AS seq, jsonb_array_length(j->'changes') AS changes,
       (SELECT jsonb_agg(length(c->'new'->>'v')) FROM jsonb_array_elements(j->'changes') c) AS value_lengths
  FROM pg_temp.records('regress_chunks', 'publication', 'regress_chunks_pub', 'chunk_changes', '1000',
                       'chunk_bytes', '65536') ORDER BY n;
SELECT count(*) FROM pg_logical_slot_peek_binary_changes('regress_chunks', NULL, NULL, 'publication', 'regress_chunks_pub', 'chunk_bytes', '65535');
SET trellara.chunk_bytes = '32kB';
SET trellara.chunk_bytes = '64kB';
RESET trellara.chunk_bytes;

SELECT pg_drop_replication_slot('regress_chunks');
DROP PUBLICATION regress_chunks_pub;
DROP TABLE chunked, chunked_other;
DROP EXTENSION trellara;
