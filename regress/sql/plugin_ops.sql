-- plugin_ops: the `trellara` output plugin emits one record per committed transaction of the
-- published tables, with every operation (INSERT, UPDATE, DELETE, TRUNCATE, transactional
-- logical message) in commit order; nothing for rolled-back transactions or subtransactions;
-- prepared transactions at COMMIT PREPARED only. Output is deterministic: records are shown
-- through jsonb operators, never with LSNs, xids, commit times, sysids or checksums.
\set VERBOSITY terse
CREATE EXTENSION trellara;

-- Records of the slot (consumed), in order, with the LSN that pg_logical_slot_get_binary_changes
-- reports for each.
CREATE FUNCTION pg_temp.records(slot name, VARIADIC options text[])
RETURNS TABLE (n bigint, lsn pg_lsn, j jsonb) LANGUAGE sql AS $$
  SELECT r.n, r.lsn, trellara.envelope_json(r.data)
    FROM pg_logical_slot_get_binary_changes(slot, NULL, NULL, VARIADIC options)
         WITH ORDINALITY AS r(lsn, xid, data, n)
   ORDER BY r.n
$$;
-- One row per change of every record: record number, record type, checksum status, change.
CREATE FUNCTION pg_temp.changes(slot name, VARIADIC options text[])
RETURNS TABLE (rec bigint, type text, checksum text, change jsonb) LANGUAGE sql AS $$
  SELECT r.n, r.j->>'type', r.j->>'checksum_status', c.change
    FROM pg_temp.records(slot, VARIADIC options) AS r
    LEFT JOIN LATERAL jsonb_array_elements(r.j->'changes') WITH ORDINALITY AS c(change, i) ON true
   ORDER BY r.n, c.i
$$;

CREATE TABLE ops (id int PRIMARY KEY, v text);
CREATE TABLE ops_other (id int PRIMARY KEY);
CREATE TABLE ops_unpublished (id int PRIMARY KEY);
CREATE TABLE xids (label text PRIMARY KEY, x xid8);  -- not published: remembers xids to compare
CREATE PUBLICATION regress_ops_pub FOR TABLE ops, ops_other;
SELECT 'init' FROM pg_create_logical_replication_slot('regress_ops', 'trellara');

-- INSERT, UPDATE (non-key: no old image under REPLICA IDENTITY DEFAULT), key-changing UPDATE
-- (old key and new row), DELETE (old key), NULL vs empty string, each its own transaction.
INSERT INTO ops VALUES (1, 'one'), (2, NULL), (3, '');
UPDATE ops SET v = 'uno' WHERE id = 1;
UPDATE ops SET id = 20, v = 'two' WHERE id = 2;
UPDATE ops SET v = NULL WHERE id = 3;
DELETE FROM ops WHERE id = 20;
-- A table outside the publication contributes nothing; a transaction touching only it emits no
-- record at all.
INSERT INTO ops_unpublished VALUES (1);
BEGIN;
INSERT INTO ops_unpublished VALUES (2);
INSERT INTO ops_other VALUES (1);
COMMIT;
SELECT * FROM pg_temp.changes('regress_ops', 'publication', 'regress_ops_pub');

-- Several operations on several tables in one transaction: one envelope, changes in order,
-- per-relation counts.
BEGIN;
INSERT INTO ops VALUES (4, 'four');
INSERT INTO ops_other VALUES (2);
UPDATE ops SET v = 'FOUR' WHERE id = 4;
DELETE FROM ops_other WHERE id = 1;
DELETE FROM ops WHERE id = 4;
COMMIT;
SELECT n, j->>'type' AS type, j->>'boundary_mode' AS boundary_mode, j->'change_count' AS change_count,
       j->'counts' AS counts, j->>'checksum_status' AS checksum_status,
       (SELECT jsonb_agg(jsonb_build_array(r->>'schema', r->>'name', r->>'replica_identity'))
          FROM jsonb_array_elements(j->'relations') r) AS relations,
       (SELECT jsonb_agg(c->>'op') FROM jsonb_array_elements(j->'changes') c) AS ops
  FROM pg_temp.records('regress_ops', 'publication', 'regress_ops_pub');

-- TRUNCATE: one change naming every truncated published table, with CASCADE and RESTART
-- IDENTITY flags; a truncated unpublished table is not named.
TRUNCATE ops, ops_other, ops_unpublished;
CREATE TABLE ops_parent (id int PRIMARY KEY);
CREATE TABLE ops_child (id int PRIMARY KEY, parent int REFERENCES ops_parent);
ALTER PUBLICATION regress_ops_pub ADD TABLE ops_parent, ops_child;
INSERT INTO ops_parent VALUES (1);
INSERT INTO ops_child VALUES (1, 1);
TRUNCATE ops_parent CASCADE;
TRUNCATE ops RESTART IDENTITY;
SELECT * FROM pg_temp.changes('regress_ops', 'publication', 'regress_ops_pub');

-- A rolled-back transaction emits nothing; a rolled-back subtransaction (savepoint) is absent
-- from its committed parent, while a released one is present.
BEGIN;
INSERT INTO ops VALUES (100, 'rolled back');
ROLLBACK;
BEGIN;
INSERT INTO ops VALUES (5, 'before savepoint');
SAVEPOINT a;
INSERT INTO ops VALUES (6, 'rolled back to savepoint');
UPDATE ops SET v = 'updated, then rolled back' WHERE id = 5;
ROLLBACK TO SAVEPOINT a;
SAVEPOINT b;
INSERT INTO ops VALUES (7, 'released savepoint');
RELEASE SAVEPOINT b;
INSERT INTO ops VALUES (8, 'after savepoint');
COMMIT;
-- A transaction whose only changes were rolled back to a savepoint emits nothing.
BEGIN;
SAVEPOINT a;
DELETE FROM ops;
ROLLBACK TO SAVEPOINT a;
COMMIT;
SELECT * FROM pg_temp.changes('regress_ops', 'publication', 'regress_ops_pub');

-- Logical messages: a transactional one is a change of its transaction, in order; a
-- non-transactional one belongs to no transaction and is not captured (docs/capture.md); a
-- transactional message in a rolled-back transaction is absent; a transaction with only a
-- transactional message is captured; the messages option turns them off.
BEGIN;
INSERT INTO ops VALUES (9, 'with message');
SELECT 'emitted' FROM pg_logical_emit_message(true, 'regress.prefix', 'transactional "content"');
SELECT 'emitted' FROM pg_logical_emit_message(false, 'regress.prefix', 'non-transactional');
INSERT INTO ops VALUES (10, 'after message');
COMMIT;
SELECT 'emitted' FROM pg_logical_emit_message(false, 'regress.prefix', 'non-transactional, alone');
SELECT 'emitted' FROM pg_logical_emit_message(true, 'regress.prefix', 'transactional, alone');
SELECT 'emitted' FROM pg_logical_emit_message(true, 'regress.binary', '\xff00fe'::bytea);
BEGIN;
SELECT 'emitted' FROM pg_logical_emit_message(true, 'regress.prefix', 'rolled back');
ROLLBACK;
SELECT * FROM pg_temp.changes('regress_ops', 'publication', 'regress_ops_pub');
BEGIN;
INSERT INTO ops VALUES (11, 'messages off');
SELECT 'emitted' FROM pg_logical_emit_message(true, 'regress.prefix', 'not wanted');
COMMIT;
SELECT 'emitted' FROM pg_logical_emit_message(true, 'regress.prefix', 'not wanted, alone');
SELECT * FROM pg_temp.changes('regress_ops', 'publication', 'regress_ops_pub', 'messages', 'false');

-- Two-phase commit: a prepared transaction appears once, at COMMIT PREPARED (not at PREPARE),
-- and never if rolled back.
BEGIN;
INSERT INTO ops VALUES (12, 'prepared, committed');
PREPARE TRANSACTION 'regress_ops_commit';
BEGIN;
INSERT INTO ops VALUES (13, 'prepared, rolled back');
SELECT 'emitted' FROM pg_logical_emit_message(true, 'regress.prefix', 'prepared, rolled back');
PREPARE TRANSACTION 'regress_ops_rollback';
INSERT INTO ops VALUES (14, 'committed after the prepares');
SELECT * FROM pg_temp.changes('regress_ops', 'publication', 'regress_ops_pub');
COMMIT PREPARED 'regress_ops_commit';
ROLLBACK PREPARED 'regress_ops_rollback';
SELECT * FROM pg_temp.changes('regress_ops', 'publication', 'regress_ops_pub');

-- Transaction identity: tx.xid is the source transaction id, tx.commit_lsn the end of its commit
-- record (the LSN the SQL interface reports for the record, and where the slot's confirmed
-- position moves to), strictly increasing; begin_lsn precedes it.
BEGIN;
INSERT INTO xids VALUES ('first', pg_current_xact_id());
INSERT INTO ops VALUES (15, 'identity 1');
COMMIT;
BEGIN;
INSERT INTO xids VALUES ('second', pg_current_xact_id());
INSERT INTO ops VALUES (16, 'identity 2');
COMMIT;
CREATE TEMP TABLE identity AS SELECT * FROM pg_temp.records('regress_ops', 'publication', 'regress_ops_pub');
SELECT n, (j->'tx'->>'xid')::bigint = (SELECT x::text::bigint FROM xids ORDER BY label OFFSET n - 1 LIMIT 1) AS xid_matches,
       (j->'tx'->>'commit_lsn')::pg_lsn = lsn AS commit_lsn_is_record_lsn,
       (j->>'begin_lsn')::pg_lsn < (j->'tx'->>'commit_lsn')::pg_lsn AS begin_before_commit,
       (j->'tx'->>'commit_lsn')::pg_lsn > lag((j->'tx'->>'commit_lsn')::pg_lsn) OVER (ORDER BY n) AS increasing,
       j->'tx'->>'flow' AS flow,
       j->'tx'->>'origin_sysid' = (SELECT system_identifier::text FROM pg_control_system()) AS sysid_matches,
       (j->>'commit_time')::timestamptz BETWEEN now() - interval '1 hour' AND clock_timestamp() AS commit_time_plausible
  FROM identity ORDER BY n;
SELECT confirmed_flush_lsn = (SELECT max((j->'tx'->>'commit_lsn')::pg_lsn) FROM identity) AS slot_confirmed_to_last_commit
  FROM pg_replication_slots WHERE slot_name = 'regress_ops';
-- The flow option names the flow in every record.
INSERT INTO ops VALUES (17, 'flow');
SELECT n, j->'tx'->>'flow' AS flow FROM pg_temp.records('regress_ops', 'publication', 'regress_ops_pub', 'flow', 'orders');

-- Nothing is left over.
SELECT count(*) AS remaining FROM pg_logical_slot_peek_binary_changes('regress_ops', NULL, NULL, 'publication', 'regress_ops_pub');
SELECT pg_drop_replication_slot('regress_ops');
DROP PUBLICATION regress_ops_pub;
DROP TABLE ops, ops_other, ops_unpublished, ops_child, ops_parent, xids;
DROP EXTENSION trellara;
