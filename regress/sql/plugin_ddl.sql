-- plugin_ddl: the extension's event triggers record DDL on published tables as transactional
-- logical messages ('trellara.ddl'), and the output plugin emits each as a `ddl` change in order
-- with the DML of the same transaction: DDL-only transactions are records too, a mixed
-- transaction keeps its order (a row written after ADD COLUMN carries the new column), rolled
-- back DDL leaves nothing, DDL on unpublished tables leaves nothing. Each change shows the steps
-- the applier acts on and the table's definition after the command. Output is deterministic: no
-- LSNs, xids, oids, commit times or checksums.
\set VERBOSITY terse
CREATE EXTENSION trellara;

-- The event triggers belong to the extension.
SELECT e.evtname, e.evtevent, e.evtfoid::regprocedure
  FROM pg_event_trigger e
  JOIN pg_depend d ON d.classid = 'pg_event_trigger'::regclass AND d.objid = e.oid AND d.deptype = 'e'
  JOIN pg_extension x ON x.oid = d.refobjid AND x.extname = 'trellara'
 ORDER BY 1;
-- Nobody but the owner may call the trigger functions directly.
SELECT p.proname, p.proacl FROM pg_proc p
 WHERE p.oid IN ('trellara.ddl_command_end()'::regprocedure, 'trellara.sql_drop()'::regprocedure)
 ORDER BY 1;

CREATE FUNCTION pg_temp.records(slot name, VARIADIC options text[])
RETURNS TABLE (n bigint, j jsonb) LANGUAGE sql AS $$
  SELECT r.n, trellara.envelope_json(r.data)
    FROM pg_logical_slot_get_binary_changes(slot, NULL, NULL, VARIADIC options)
         WITH ORDINALITY AS r(lsn, xid, data, n)
   ORDER BY r.n
$$;
-- One row per change of every record (records without changes, manifests and commit markers, as
-- one row with op NULL): record number, record type, checksum status, op, relation, and the DDL
-- (tag, steps, definition after) or the new row.
CREATE FUNCTION pg_temp.changes(slot name, VARIADIC options text[])
RETURNS TABLE (rec bigint, type text, checksum text, op text, relation text, detail jsonb) LANGUAGE sql AS $$
  SELECT r.n, r.j->>'type', r.j->>'checksum_status', c->>'op', c->>'relation',
         CASE WHEN c->>'op' = 'ddl'
              THEN jsonb_build_object('tag', c->'command_tag', 'object', c->'object_identity',
                                      'steps', c->'steps', 'definition', c->'definition')
              ELSE c->'new' END
    FROM pg_temp.records(slot, VARIADIC options) AS r
    LEFT JOIN LATERAL jsonb_array_elements(r.j->'changes') WITH ORDINALITY AS x(c, i) ON true
   ORDER BY r.n, x.i
$$;

CREATE TABLE ddl_t (id int PRIMARY KEY, v text);
CREATE TABLE ddl_unpublished (id int PRIMARY KEY);
CREATE PUBLICATION regress_ddl_pub FOR TABLE ddl_t;
SELECT 'init' FROM pg_create_logical_replication_slot('regress_ddl', 'trellara');

-- A DDL-only transaction is one envelope with one ddl change.
ALTER TABLE ddl_t ADD COLUMN note text;
SELECT * FROM pg_temp.changes('regress_ddl', 'publication', 'regress_ddl_pub');

-- A mixed transaction keeps its order; the insert after ADD COLUMN carries the new column.
BEGIN;
INSERT INTO ddl_t VALUES (1, 'one', 'n1');
ALTER TABLE ddl_t ADD COLUMN extra int;
INSERT INTO ddl_t VALUES (2, 'two', 'n2', 22);
COMMIT;
SELECT * FROM pg_temp.changes('regress_ddl', 'publication', 'regress_ddl_pub');

-- The same, with messages = false: DDL records are not user messages and still come through.
BEGIN;
INSERT INTO ddl_t VALUES (3, 'three', NULL, 3);
ALTER TABLE ddl_t ALTER COLUMN extra SET DEFAULT 7;
SELECT 'msg' FROM pg_logical_emit_message(true, 'user.prefix', 'hidden');
COMMIT;
SELECT op, relation, detail FROM pg_temp.changes('regress_ddl', 'publication', 'regress_ddl_pub', 'messages', 'false');

-- DDL in a rolled-back transaction, and in a rolled-back savepoint, leaves nothing; DDL on an
-- unpublished table leaves nothing.
BEGIN;
ALTER TABLE ddl_t ADD COLUMN gone int;
ROLLBACK;
BEGIN;
SAVEPOINT s;
ALTER TABLE ddl_t ADD COLUMN gone_too int;
ROLLBACK TO SAVEPOINT s;
INSERT INTO ddl_t VALUES (4, 'four', NULL, 4);
COMMIT;
ALTER TABLE ddl_unpublished ADD COLUMN x int;
CREATE INDEX ON ddl_unpublished (x);
DROP TABLE ddl_unpublished;
SELECT * FROM pg_temp.changes('regress_ddl', 'publication', 'regress_ddl_pub');

-- RENAME COLUMN, RENAME TABLE (the record names the table before the command).
ALTER TABLE ddl_t RENAME COLUMN note TO remark;
ALTER TABLE ddl_t RENAME TO ddl_renamed;
SELECT op, relation, detail FROM pg_temp.changes('regress_ddl', 'publication', 'regress_ddl_pub');

-- ALTER COLUMN TYPE int -> bigint; with USING (the step says so: the applier will not apply it).
ALTER TABLE ddl_renamed ALTER COLUMN extra TYPE bigint;
ALTER TABLE ddl_renamed ALTER COLUMN remark TYPE int USING length(remark);
SELECT op, relation, detail->'steps' AS steps FROM pg_temp.changes('regress_ddl', 'publication', 'regress_ddl_pub');

-- ADD COLUMN with an immutable and with a mutable default; SET/DROP NOT NULL; DROP DEFAULT.
ALTER TABLE ddl_renamed ADD COLUMN zero int DEFAULT 0;
ALTER TABLE ddl_renamed ADD COLUMN created timestamptz DEFAULT now();
ALTER TABLE ddl_renamed ALTER COLUMN zero SET NOT NULL;
ALTER TABLE ddl_renamed ALTER COLUMN zero DROP NOT NULL, ALTER COLUMN extra DROP DEFAULT;
SELECT op, detail->'steps' AS steps,
       (SELECT jsonb_agg(col) FROM jsonb_array_elements(detail->'definition'->'columns') col
         WHERE col->>'name' IN ('zero', 'created', 'extra')) AS columns
  FROM pg_temp.changes('regress_ddl', 'publication', 'regress_ddl_pub');

-- DROP and ADD PRIMARY KEY, REPLICA IDENTITY FULL, CREATE INDEX (no shape change), DROP COLUMN.
ALTER TABLE ddl_renamed DROP CONSTRAINT ddl_t_pkey;
ALTER TABLE ddl_renamed ADD PRIMARY KEY (id, zero);
ALTER TABLE ddl_renamed REPLICA IDENTITY FULL;
CREATE INDEX ddl_renamed_v ON ddl_renamed (v);
ALTER TABLE ddl_renamed DROP COLUMN created;
SELECT op, detail->'tag' AS tag, detail->'steps' AS steps, detail->'definition'->'primary_key' AS pk,
       detail->'definition'->'replica_identity' AS ri
  FROM pg_temp.changes('regress_ddl', 'publication', 'regress_ddl_pub');

-- DROP TABLE: a ddl change without a definition.
DROP TABLE ddl_renamed;
SELECT * FROM pg_temp.changes('regress_ddl', 'publication', 'regress_ddl_pub');
SELECT 'drop' FROM pg_drop_replication_slot('regress_ddl');

-- CREATE TABLE in a FOR ALL TABLES publication and in a TABLES IN SCHEMA publication, written in
-- the same transaction: the ddl change comes first, then the rows.
CREATE SCHEMA ddl_s;
CREATE PUBLICATION regress_ddl_all FOR ALL TABLES;
CREATE PUBLICATION regress_ddl_schema FOR TABLES IN SCHEMA ddl_s;
SELECT 'init' FROM pg_create_logical_replication_slot('regress_ddl_all', 'trellara');
SELECT 'init' FROM pg_create_logical_replication_slot('regress_ddl_schema', 'trellara');
BEGIN;
CREATE TABLE ddl_s.fresh (id int PRIMARY KEY, v text DEFAULT 'x');
INSERT INTO ddl_s.fresh VALUES (1, 'a'), (2, DEFAULT);
COMMIT;
CREATE TABLE public.elsewhere (id int);
SELECT * FROM pg_temp.changes('regress_ddl_all', 'publication', 'regress_ddl_all');
SELECT * FROM pg_temp.changes('regress_ddl_schema', 'publication', 'regress_ddl_schema');
SELECT 'drop' FROM pg_drop_replication_slot('regress_ddl_all');
SELECT 'drop' FROM pg_drop_replication_slot('regress_ddl_schema');
DROP PUBLICATION regress_ddl_all;
DROP PUBLICATION regress_ddl_schema;
DROP PUBLICATION regress_ddl_pub;
DROP SCHEMA ddl_s CASCADE;
DROP TABLE public.elsewhere;

-- CREATE TABLE AS writes its rows before the table's DDL record: the record (a create_table step)
-- comes after the rows; the applier runs it ahead of them (docs/schema-changes.md).
CREATE PUBLICATION regress_ddl_all FOR ALL TABLES;
SELECT 'init' FROM pg_create_logical_replication_slot('regress_ddl_ctas', 'trellara');
CREATE TABLE ddl_ctas AS SELECT g AS id FROM generate_series(1, 2) g;
SELECT op, relation, CASE WHEN op = 'ddl' THEN detail->'steps' ELSE detail END AS detail
  FROM pg_temp.changes('regress_ddl_ctas', 'publication', 'regress_ddl_all');
SELECT 'drop' FROM pg_drop_replication_slot('regress_ddl_ctas');
DROP PUBLICATION regress_ddl_all;
DROP TABLE ddl_ctas;

-- Fail closed: ADD IDENTITY and SET SCHEMA are unsupported steps naming them; SET SCHEMA's record
-- names the table in its old schema. COMMENT is no shape change.
CREATE SCHEMA ddl_other;
CREATE TABLE ddl_u (id int NOT NULL, v text);
CREATE PUBLICATION regress_ddl_u FOR TABLE ddl_u;
SELECT 'init' FROM pg_create_logical_replication_slot('regress_ddl_u', 'trellara');
ALTER TABLE ddl_u ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY;
ALTER TABLE ddl_u SET SCHEMA ddl_other;
COMMENT ON TABLE ddl_other.ddl_u IS 'no shape change';
-- A table dropped by DROP SCHEMA ... CASCADE is recorded like DROP TABLE (with the statement's tag).
DROP SCHEMA ddl_other CASCADE;
SELECT op, relation, detail->'tag' AS tag, detail->'steps' AS steps, detail->'definition'->'relation' AS after
  FROM pg_temp.changes('regress_ddl_u', 'publication', 'regress_ddl_u');
SELECT 'drop' FROM pg_drop_replication_slot('regress_ddl_u');
DROP PUBLICATION regress_ddl_u;

-- Partitions. Published via the root: a statement on the root is one record, the root's (its
-- recursion to the partitions adds nothing); DDL on a partition alone carries an unsupported step
-- naming the root. Published as themselves: the root and each partition have their own record.
CREATE TABLE ddl_part (id int, region text, v text, PRIMARY KEY (id, region)) PARTITION BY LIST (region);
CREATE TABLE ddl_part_eu PARTITION OF ddl_part FOR VALUES IN ('eu');
CREATE PUBLICATION regress_ddl_root FOR TABLE ddl_part WITH (publish_via_partition_root = true);
CREATE PUBLICATION regress_ddl_leaves FOR TABLE ddl_part;
SELECT 'init' FROM pg_create_logical_replication_slot('regress_ddl_root', 'trellara');
SELECT 'init' FROM pg_create_logical_replication_slot('regress_ddl_leaves', 'trellara');
ALTER TABLE ddl_part ADD COLUMN extra int;
ALTER TABLE ddl_part_eu ALTER COLUMN v SET NOT NULL;
INSERT INTO ddl_part VALUES (1, 'eu', 'x', 1);
SELECT 'root' AS via, op, relation, CASE WHEN op = 'ddl' THEN detail->'steps' ELSE detail END AS detail
  FROM pg_temp.changes('regress_ddl_root', 'publication', 'regress_ddl_root');
SELECT 'leaves' AS via, op, relation, CASE WHEN op = 'ddl' THEN detail->'steps' ELSE detail END AS detail
  FROM pg_temp.changes('regress_ddl_leaves', 'publication', 'regress_ddl_leaves');
SELECT 'drop' FROM pg_drop_replication_slot('regress_ddl_root');
SELECT 'drop' FROM pg_drop_replication_slot('regress_ddl_leaves');
DROP PUBLICATION regress_ddl_root;
DROP PUBLICATION regress_ddl_leaves;
DROP TABLE ddl_part;

-- DDL run by the table's owner without superuser is captured the same way (the trigger functions
-- need no EXECUTE grant).
CREATE ROLE regress_ddl_owner;
CREATE TABLE ddl_owned (id int PRIMARY KEY);
ALTER TABLE ddl_owned OWNER TO regress_ddl_owner;
CREATE PUBLICATION regress_ddl_owned FOR TABLE ddl_owned;
SELECT 'init' FROM pg_create_logical_replication_slot('regress_ddl_owned', 'trellara');
SET ROLE regress_ddl_owner;
ALTER TABLE ddl_owned ADD COLUMN v text NOT NULL DEFAULT 'x';
RESET ROLE;
SELECT op, relation, detail->'steps' AS steps, detail->'definition'->'columns' AS columns
  FROM pg_temp.changes('regress_ddl_owned', 'publication', 'regress_ddl_owned');
SELECT 'drop' FROM pg_drop_replication_slot('regress_ddl_owned');
DROP PUBLICATION regress_ddl_owned;
DROP TABLE ddl_owned;
DROP ROLE regress_ddl_owner;

-- A 'trellara.ddl' message that is not a valid Ddl stops decoding with an ERROR naming its LSN
-- (shown here with the LSN masked); it is never skipped.
CREATE TABLE ddl_bad (id int PRIMARY KEY);
CREATE PUBLICATION regress_ddl_bad FOR TABLE ddl_bad;
SELECT 'init' FROM pg_create_logical_replication_slot('regress_ddl_bad', 'trellara');
BEGIN;
INSERT INTO ddl_bad VALUES (1);
SELECT 'emitted' FROM pg_logical_emit_message(true, 'trellara.ddl', 'garbage');
COMMIT;
DO $$
BEGIN
  PERFORM * FROM pg_temp.changes('regress_ddl_bad', 'publication', 'regress_ddl_bad');
  RAISE NOTICE 'decoded without error';
EXCEPTION WHEN OTHERS THEN
  RAISE NOTICE '%: %', SQLSTATE, regexp_replace(SQLERRM, '[0-9A-F]+/[0-9A-F]+', 'X/X', 'g');
END
$$;
SELECT 'drop' FROM pg_drop_replication_slot('regress_ddl_bad');
DROP PUBLICATION regress_ddl_bad;
DROP TABLE ddl_bad;

-- DROP EXTENSION removes the event triggers.
DROP EXTENSION trellara;
SELECT count(*) AS trellara_event_triggers FROM pg_event_trigger WHERE evtname LIKE 'trellara%';
