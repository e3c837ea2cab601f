-- plugin_identity: UPDATE and DELETE carry the old key image under REPLICA IDENTITY DEFAULT
-- (primary key) and USING INDEX (the index's columns), the complete old row under FULL, and
-- nothing under NOTHING (where Postgres refuses UPDATE/DELETE of a published table). The
-- relation description marks the key columns, and its fingerprint changes whenever the columns,
-- their types or the key change.
\set VERBOSITY terse
CREATE EXTENSION trellara;

CREATE FUNCTION pg_temp.records(slot name, VARIADIC options text[])
RETURNS TABLE (n bigint, j jsonb) LANGUAGE sql AS $$
  SELECT r.n, trellara.envelope_json(r.data)
    FROM pg_logical_slot_get_binary_changes(slot, NULL, NULL, VARIADIC options)
         WITH ORDINALITY AS r(lsn, xid, data, n)
   ORDER BY r.n
$$;
CREATE FUNCTION pg_temp.changes(slot name, VARIADIC options text[])
RETURNS TABLE (rec bigint, relation text, op text, old_image text, old jsonb, new jsonb) LANGUAGE sql AS $$
  SELECT r.n, c->>'relation', c->>'op', c->>'old_image', c->'old', c->'new'
    FROM pg_temp.records(slot, VARIADIC options) AS r,
         jsonb_array_elements(r.j->'changes') WITH ORDINALITY AS x(c, i)
   ORDER BY r.n, x.i
$$;

CREATE TABLE ri_default (id int, region text, v text, PRIMARY KEY (region, id));
CREATE TABLE ri_full (id int PRIMARY KEY, v text, w int);
ALTER TABLE ri_full REPLICA IDENTITY FULL;
CREATE TABLE ri_index (id int PRIMARY KEY, code text NOT NULL, sub int NOT NULL, v text);
CREATE UNIQUE INDEX ri_index_code ON ri_index (code, sub);
ALTER TABLE ri_index REPLICA IDENTITY USING INDEX ri_index_code;
CREATE TABLE ri_nothing (id int PRIMARY KEY, v text);
ALTER TABLE ri_nothing REPLICA IDENTITY NOTHING;
CREATE TABLE ri_no_key (id int, v text);  -- DEFAULT without a primary key: no identity
CREATE PUBLICATION regress_identity_pub FOR TABLE ri_default, ri_full, ri_index, ri_nothing, ri_no_key;
SELECT 'init' FROM pg_create_logical_replication_slot('regress_identity', 'trellara');

INSERT INTO ri_default VALUES (1, 'eu', 'a');
UPDATE ri_default SET v = 'b';                        -- key unchanged: no old image
UPDATE ri_default SET id = 2, v = 'c';                -- key changed: old key (all key columns)
UPDATE ri_default SET region = 'us';
DELETE FROM ri_default;
INSERT INTO ri_full VALUES (1, 'a', NULL);
UPDATE ri_full SET v = 'b';                           -- old image: the whole old row, nulls included
UPDATE ri_full SET id = 2, w = 7;
DELETE FROM ri_full;
INSERT INTO ri_index VALUES (1, 'x', 1, 'a');
UPDATE ri_index SET v = 'b';                          -- index columns unchanged: no old image
UPDATE ri_index SET id = 2;                           -- primary key changes, identity does not
UPDATE ri_index SET sub = 2;                          -- identity changed: old (code, sub)
DELETE FROM ri_index;
INSERT INTO ri_nothing VALUES (1, 'a');
INSERT INTO ri_no_key VALUES (1, 'a');
SELECT * FROM pg_temp.changes('regress_identity', 'publication', 'regress_identity_pub');
-- Postgres refuses UPDATE and DELETE on a table without replica identity that publishes them.
UPDATE ri_nothing SET v = 'b';
DELETE FROM ri_nothing;
UPDATE ri_no_key SET v = 'b';
DELETE FROM ri_no_key;

-- Each relation's description: replica identity and key columns.
INSERT INTO ri_default VALUES (3, 'eu', 'd');
INSERT INTO ri_full VALUES (3, 'd', 3);
INSERT INTO ri_index VALUES (3, 'y', 3, 'd');
INSERT INTO ri_nothing VALUES (3, 'd');
INSERT INTO ri_no_key VALUES (3, 'd');
SELECT rel->>'name' COLLATE "C" AS relation, rel->>'replica_identity' AS replica_identity,
       (SELECT string_agg(c->>'name' || CASE WHEN (c->'key')::bool THEN ' (key)' ELSE '' END, ', ')
          FROM jsonb_array_elements(rel->'columns') c) AS columns
  FROM pg_temp.records('regress_identity', 'publication', 'regress_identity_pub') r,
       jsonb_array_elements(r.j->'relations') rel
 ORDER BY 1;

-- The fingerprint changes with the key, the replica identity, a column's type, an added or
-- dropped column; it does not change when nothing about the relation changed. Each change below
-- is captured as its own transaction, so each record describes the relation as it was then.
INSERT INTO ri_default VALUES (10, 'eu', 'unchanged 1');
INSERT INTO ri_default VALUES (11, 'eu', 'unchanged 2');
ALTER TABLE ri_default REPLICA IDENTITY FULL;
INSERT INTO ri_default VALUES (12, 'eu', 'identity full');
ALTER TABLE ri_default REPLICA IDENTITY DEFAULT;
INSERT INTO ri_default VALUES (13, 'eu', 'identity default again');
ALTER TABLE ri_default ADD COLUMN extra int;
INSERT INTO ri_default VALUES (14, 'eu', 'column added');
ALTER TABLE ri_default ALTER COLUMN extra TYPE bigint;
INSERT INTO ri_default VALUES (15, 'eu', 'column type changed');
ALTER TABLE ri_default DROP CONSTRAINT ri_default_pkey, ADD PRIMARY KEY (id);
INSERT INTO ri_default VALUES (16, 'eu', 'key changed');
ALTER TABLE ri_default DROP COLUMN extra;
INSERT INTO ri_default VALUES (17, 'eu', 'column dropped');
CREATE TEMP TABLE described AS
  SELECT n, r.j->'changes'->0->'new'->>'v' AS step, r.j->'relations'->0 AS rel
    FROM pg_temp.records('regress_identity', 'publication', 'regress_identity_pub') r;
SELECT n, step, rel->>'replica_identity' AS replica_identity,
       (SELECT string_agg(c->>'name' || ' ' || (c->>'type') || CASE WHEN (c->'key')::bool THEN ' (key)' ELSE '' END, ', ')
          FROM jsonb_array_elements(rel->'columns') c) AS columns,
       rel->'fingerprint' = lag(rel->'fingerprint') OVER (ORDER BY n) AS same_as_previous,
       rel->'fingerprint' = first_value(rel->'fingerprint') OVER (ORDER BY n) AS same_as_first
  FROM described ORDER BY n;
-- Six descriptions, six fingerprints ("unchanged 1", "unchanged 2" and "identity default again"
-- share one).
SELECT count(DISTINCT rel->'fingerprint') AS distinct_fingerprints FROM described;

SELECT pg_drop_replication_slot('regress_identity');
DROP PUBLICATION regress_identity_pub;
DROP TABLE ri_default, ri_full, ri_index, ri_nothing, ri_no_key;
DROP EXTENSION trellara;
