-- plugin_invalidation: the relation cache is rebuilt, not freed under its user, when the catalog
-- changes in the middle of decoding (docs/capture.md, "Relation cache"): a partition published
-- via its root keeps converting rows correctly after the root and the partition change shape
-- (new conversion map on copied descriptors, the old one freed at the next lookup), and a
-- publication change in the middle of a transaction takes effect at the next change.
\set VERBOSITY terse
CREATE EXTENSION trellara;
CREATE FUNCTION pg_temp.changes(slot name, VARIADIC options text[])
RETURNS TABLE (seq bigint, op text, relation text, new jsonb) LANGUAGE sql AS $$
  SELECT row_number() OVER (ORDER BY r.n, x.i), c->>'op', coalesce(c->>'relation', c->>'relations'), c->'new'
    FROM pg_logical_slot_get_binary_changes(slot, NULL, NULL, VARIADIC options)
         WITH ORDINALITY AS r(lsn, xid, data, n),
         jsonb_array_elements(trellara.envelope_json(r.data)->'changes') WITH ORDINALITY AS x(c, i)
   ORDER BY r.n, x.i
$$;
CREATE TABLE inv_root (id int, region text, v text, PRIMARY KEY (id, region)) PARTITION BY LIST (region);
-- The partition's columns are in another order than the root's, so rows need the map.
CREATE TABLE inv_eu (v text, region text NOT NULL, id int NOT NULL);
ALTER TABLE inv_root ATTACH PARTITION inv_eu FOR VALUES IN ('eu');
CREATE TABLE inv_other (id int PRIMARY KEY, v text);
CREATE PUBLICATION inv_pub FOR TABLE inv_root WITH (publish_via_partition_root = true);
SELECT 'init' FROM pg_create_logical_replication_slot('regress_inv', 'trellara');

BEGIN;
INSERT INTO inv_root VALUES (1, 'eu', 'before');
ALTER TABLE inv_root ADD COLUMN extra int;   -- invalidates root and partition mid-transaction
INSERT INTO inv_root VALUES (2, 'eu', 'after add column', 42);
ALTER PUBLICATION inv_pub ADD TABLE inv_other;  -- invalidates the publication list
INSERT INTO inv_other VALUES (1, 'now a member');
INSERT INTO inv_root VALUES (3, 'eu', 'after publication change', 43);
COMMIT;
ALTER TABLE inv_root DROP COLUMN v;
INSERT INTO inv_root VALUES (4, 'eu', 44);
-- Many invalidations in one decoding session: each transaction changes the root again.
DO $$
BEGIN
  FOR i IN 1..20 LOOP
    EXECUTE format('ALTER TABLE inv_root ADD COLUMN c%s int', i);
    EXECUTE format('INSERT INTO inv_root (id, region, c%s) VALUES (%s, ''eu'', %s)', i, 100 + i, i);
  END LOOP;
END $$;
CREATE TEMP TABLE inv_changes AS SELECT * FROM pg_temp.changes('regress_inv', 'publication', 'inv_pub');
-- The first two transactions in full, in decoding order; then every row of the loop has its own
-- column set.
SELECT op, relation, new FROM inv_changes WHERE (new->>'id')::int < 100 ORDER BY seq;
SELECT count(*) AS loop_rows,
       count(*) FILTER (WHERE new->>('c' || ((new->>'id')::int - 100)) = ((new->>'id')::int - 100)::text
                          AND NOT new ? 'v') AS rows_with_their_own_column
  FROM inv_changes WHERE (new->>'id')::int >= 100;
SELECT new FROM inv_changes WHERE new->>'id' = '120';

SELECT 'dropped' FROM pg_drop_replication_slot('regress_inv');
DROP PUBLICATION inv_pub;
DROP TABLE inv_root, inv_other;
DROP EXTENSION trellara;
