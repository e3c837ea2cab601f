-- plugin_publication: only the publication's tables are captured, with pgoutput's membership
-- rules: FOR TABLE, FOR TABLES IN SCHEMA, FOR ALL TABLES, partitions published as themselves
-- or as their root (publish_via_partition_root), the publication's actions; a table added to or
-- removed from the publication is captured exactly while it is a member. Row filters and column
-- lists are refused with an ERROR naming the publication and the table.
\set VERBOSITY terse
CREATE EXTENSION trellara;

CREATE FUNCTION pg_temp.records(slot name, VARIADIC options text[])
RETURNS TABLE (n bigint, j jsonb) LANGUAGE sql AS $$
  SELECT r.n, trellara.envelope_json(r.data)
    FROM pg_logical_slot_get_binary_changes(slot, NULL, NULL, VARIADIC options)
         WITH ORDINALITY AS r(lsn, xid, data, n)
   ORDER BY r.n
$$;
-- One row per change: record number, relation (or truncated relations), op, old and new tuple.
CREATE FUNCTION pg_temp.changes(slot name, VARIADIC options text[])
RETURNS TABLE (rec bigint, op text, relation text, old jsonb, new jsonb) LANGUAGE sql AS $$
  SELECT r.n, c->>'op', coalesce(c->>'relation', c->>'relations'), c->'old', c->'new'
    FROM pg_temp.records(slot, VARIADIC options) AS r,
         jsonb_array_elements(r.j->'changes') WITH ORDINALITY AS x(c, i)
   ORDER BY r.n, x.i
$$;

CREATE SCHEMA pub_a;
CREATE SCHEMA pub_b;
CREATE TABLE pub_a.t1 (id int PRIMARY KEY, v text);
CREATE TABLE pub_a.t2 (id int PRIMARY KEY, v text);
CREATE TABLE pub_b.t3 (id int PRIMARY KEY, v text);
CREATE TABLE pub_b.t4 (id int PRIMARY KEY, v text);
CREATE PUBLICATION regress_pub_table FOR TABLE pub_a.t1;
CREATE PUBLICATION regress_pub_schema FOR TABLES IN SCHEMA pub_b;
CREATE PUBLICATION regress_pub_all FOR ALL TABLES;
CREATE PUBLICATION regress_pub_mixed FOR TABLE pub_a.t2, TABLES IN SCHEMA pub_b;
SELECT 'init' FROM pg_create_logical_replication_slot('regress_pub', 'trellara');

-- One transaction touching all four tables, decoded through each publication (peek), then
-- through two publications at once (their union).
BEGIN;
INSERT INTO pub_a.t1 VALUES (1, 'a.t1');
INSERT INTO pub_a.t2 VALUES (1, 'a.t2');
INSERT INTO pub_b.t3 VALUES (1, 'b.t3');
INSERT INTO pub_b.t4 VALUES (1, 'b.t4');
COMMIT;
CREATE FUNCTION pg_temp.peek_relations(VARIADIC options text[]) RETURNS text LANGUAGE sql AS $$
  SELECT string_agg(c->>'relation', ', ' ORDER BY c->>'relation' COLLATE "C")
    FROM pg_logical_slot_peek_binary_changes('regress_pub', NULL, NULL, VARIADIC options) r,
         jsonb_array_elements(trellara.envelope_json(r.data)->'changes') c
$$;
SELECT p AS publication, pg_temp.peek_relations('publication', p) AS captured
  FROM unnest(ARRAY['regress_pub_table', 'regress_pub_schema', 'regress_pub_all', 'regress_pub_mixed',
                    'regress_pub_table,regress_pub_schema']) p;
-- A table created later in a FOR TABLES IN SCHEMA / FOR ALL TABLES publication's scope is a
-- member from its creation.
CREATE TABLE pub_b.t5 (id int PRIMARY KEY);
INSERT INTO pub_b.t5 VALUES (1);
SELECT * FROM pg_temp.changes('regress_pub', 'publication', 'regress_pub_schema');

-- A table added to and removed from the publication: captured exactly while it is a member,
-- including when membership changes inside the transaction that also writes the table.
INSERT INTO pub_a.t2 VALUES (2, 'before add');
ALTER PUBLICATION regress_pub_table ADD TABLE pub_a.t2;
INSERT INTO pub_a.t2 VALUES (3, 'while member');
ALTER PUBLICATION regress_pub_table DROP TABLE pub_a.t2;
INSERT INTO pub_a.t2 VALUES (4, 'after drop');
BEGIN;
INSERT INTO pub_a.t2 VALUES (5, 'same transaction, before add');
ALTER PUBLICATION regress_pub_table ADD TABLE pub_a.t2;
INSERT INTO pub_a.t2 VALUES (6, 'same transaction, after add');
COMMIT;
BEGIN;
INSERT INTO pub_a.t2 VALUES (7, 'same transaction, before drop');
ALTER PUBLICATION regress_pub_table DROP TABLE pub_a.t2;
INSERT INTO pub_a.t2 VALUES (8, 'same transaction, after drop');
COMMIT;
-- SET TABLE replaces the member list; a schema added with ADD TABLES IN SCHEMA.
ALTER PUBLICATION regress_pub_table SET TABLE pub_a.t2;
INSERT INTO pub_a.t1 VALUES (9, 'no longer member');
INSERT INTO pub_a.t2 VALUES (9, 'member by SET TABLE');
ALTER PUBLICATION regress_pub_table ADD TABLES IN SCHEMA pub_b;
INSERT INTO pub_b.t3 VALUES (9, 'member by schema');
ALTER PUBLICATION regress_pub_table DROP TABLES IN SCHEMA pub_b;
INSERT INTO pub_b.t3 VALUES (10, 'schema dropped');
SELECT * FROM pg_temp.changes('regress_pub', 'publication', 'regress_pub_table');

-- Publication actions: publish = 'insert' captures inserts only (no UPDATE, DELETE, TRUNCATE).
CREATE PUBLICATION regress_pub_inserts FOR TABLE pub_a.t1 WITH (publish = 'insert');
INSERT INTO pub_a.t1 VALUES (20, 'inserted');
UPDATE pub_a.t1 SET v = 'updated' WHERE id = 20;
DELETE FROM pub_a.t1 WHERE id = 20;
TRUNCATE pub_a.t1;
-- publish = 'update, delete, truncate' is the complement.
ALTER PUBLICATION regress_pub_inserts SET (publish = 'update, delete, truncate');
INSERT INTO pub_a.t1 VALUES (21, 'inserted');
UPDATE pub_a.t1 SET v = 'updated' WHERE id = 21;
DELETE FROM pub_a.t1 WHERE id = 21;
TRUNCATE pub_a.t1;
SELECT * FROM pg_temp.changes('regress_pub', 'publication', 'regress_pub_inserts');

-- Partitioned tables. A partition with a different column order than its root, and a
-- sub-partitioned branch.
CREATE TABLE pub_a.measure (id int, region text, v text, PRIMARY KEY (id, region)) PARTITION BY LIST (region);
CREATE TABLE pub_a.measure_eu PARTITION OF pub_a.measure FOR VALUES IN ('eu');
CREATE TABLE pub_a.measure_us (v text, region text NOT NULL, id int NOT NULL);
ALTER TABLE pub_a.measure ATTACH PARTITION pub_a.measure_us FOR VALUES IN ('us');
CREATE TABLE pub_a.measure_asia PARTITION OF pub_a.measure FOR VALUES IN ('jp', 'kr') PARTITION BY LIST (region);
CREATE TABLE pub_a.measure_jp PARTITION OF pub_a.measure_asia FOR VALUES IN ('jp');
CREATE PUBLICATION regress_pub_root FOR TABLE pub_a.measure WITH (publish_via_partition_root = true);
CREATE PUBLICATION regress_pub_leaves FOR TABLE pub_a.measure WITH (publish_via_partition_root = false);
CREATE PUBLICATION regress_pub_all_root FOR ALL TABLES WITH (publish_via_partition_root = true);
INSERT INTO pub_a.measure VALUES (1, 'eu', 'eu row'), (2, 'us', 'us row'), (3, 'jp', 'jp row');
UPDATE pub_a.measure SET v = 'us row, updated' WHERE id = 2;
UPDATE pub_a.measure SET region = 'eu' WHERE id = 2;  -- moves the row to another partition
DELETE FROM pub_a.measure WHERE id = 3;
TRUNCATE pub_a.measure;
-- publish_via_partition_root = true: every change is a change of the root, in the root's
-- column order; a row moved between partitions is a DELETE and an INSERT (as in Postgres); the
-- TRUNCATE of the root names the root once.
SELECT * FROM pg_temp.changes('regress_pub', 'publication', 'regress_pub_root') WHERE rec > 0;
-- The same WAL through the other publications (the slot was consumed above, so the writes are
-- repeated): partitions as themselves, and FOR ALL TABLES via the root.
INSERT INTO pub_a.measure VALUES (1, 'eu', 'eu row'), (2, 'us', 'us row'), (3, 'jp', 'jp row');
UPDATE pub_a.measure SET region = 'eu' WHERE id = 2;
TRUNCATE pub_a.measure;
SELECT 'leaves' AS publication, c.* FROM pg_temp.changes('regress_pub', 'publication', 'regress_pub_leaves') c;
INSERT INTO pub_a.measure VALUES (1, 'eu', 'eu row'), (2, 'us', 'us row'), (3, 'jp', 'jp row');
UPDATE pub_a.measure SET region = 'eu' WHERE id = 2;
SELECT 'all tables via root' AS publication, c.* FROM pg_temp.changes('regress_pub', 'publication', 'regress_pub_all_root') c;
-- Truncating a single partition while the publication publishes via the root cannot be
-- expressed as a change of the root (it would empty every partition on the target): it is
-- captured as a TRUNCATE of the partition itself, so a target without that table fails closed.
INSERT INTO pub_a.measure VALUES (4, 'us', 'us row 4');
TRUNCATE pub_a.measure_us;
SELECT * FROM pg_temp.changes('regress_pub', 'publication', 'regress_pub_root');
-- Through regress_pub_leaves the same TRUNCATE names the partition.
INSERT INTO pub_a.measure VALUES (4, 'us', 'us row 4');
TRUNCATE pub_a.measure_us;
SELECT * FROM pg_temp.changes('regress_pub', 'publication', 'regress_pub_leaves');

-- Row filters and column lists are refused: applying a filtered stream as if it were complete
-- would silently diverge. The ERROR names the publication and the table.
CREATE TABLE pub_a.filtered (id int PRIMARY KEY, v text);
CREATE PUBLICATION regress_pub_row_filter FOR TABLE pub_a.filtered WHERE (id > 10);
CREATE PUBLICATION regress_pub_column_list FOR TABLE pub_a.filtered (id);
INSERT INTO pub_a.filtered VALUES (11, 'x');
SELECT count(*) FROM pg_logical_slot_peek_binary_changes('regress_pub', NULL, NULL, 'publication', 'regress_pub_row_filter');
SELECT count(*) FROM pg_logical_slot_peek_binary_changes('regress_pub', NULL, NULL, 'publication', 'regress_pub_column_list');
-- The slot is unharmed: the same changes decode through an unfiltered publication.
SELECT * FROM pg_temp.changes('regress_pub', 'publication', 'regress_pub_all');
-- A publication that does not exist is an ERROR naming it.
INSERT INTO pub_a.filtered VALUES (12, 'y');
SELECT count(*) FROM pg_logical_slot_peek_binary_changes('regress_pub', NULL, NULL, 'publication', 'regress_no_such_pub');
SELECT count(*) FROM pg_logical_slot_get_binary_changes('regress_pub', NULL, NULL, 'publication', 'regress_pub_all');

SELECT pg_drop_replication_slot('regress_pub');
DROP PUBLICATION regress_pub_table, regress_pub_schema, regress_pub_all, regress_pub_mixed, regress_pub_inserts,
  regress_pub_root, regress_pub_leaves, regress_pub_all_root, regress_pub_row_filter, regress_pub_column_list;
DROP SCHEMA pub_a, pub_b CASCADE;
DROP EXTENSION trellara;
