-- plugin_toast: a TOASTed value that an UPDATE did not change is sent as the unchanged-TOAST
-- marker ({"unchanged_toast": true}), never as NULL and never as a wrong value; a changed or
-- inserted TOASTed value is sent in full; old images are always complete.
\set VERBOSITY terse
CREATE EXTENSION trellara;

CREATE FUNCTION pg_temp.records(slot name, VARIADIC options text[])
RETURNS TABLE (n bigint, j jsonb) LANGUAGE sql AS $$
  SELECT r.n, trellara.envelope_json(r.data)
    FROM pg_logical_slot_get_binary_changes(slot, NULL, NULL, VARIADIC options)
         WITH ORDINALITY AS r(lsn, xid, data, n)
   ORDER BY r.n
$$;
-- A tuple with every long text value replaced by its length and md5, so output stays short.
CREATE FUNCTION pg_temp.short(tuple jsonb) RETURNS jsonb LANGUAGE sql AS $$
  SELECT jsonb_object_agg(k, CASE WHEN jsonb_typeof(v) = 'string' AND length(v #>> '{}') > 40
                                  THEN to_jsonb(format('%s chars, md5 %s', length(v #>> '{}'), md5(v #>> '{}')))
                                  ELSE v END)
    FROM jsonb_each(tuple) AS e(k, v)
$$;
CREATE FUNCTION pg_temp.changes(slot name, VARIADIC options text[])
RETURNS TABLE (rec bigint, op text, old_image text, old jsonb, new jsonb) LANGUAGE sql AS $$
  SELECT r.n, c->>'op', c->>'old_image', pg_temp.short(c->'old'), pg_temp.short(c->'new')
    FROM pg_temp.records(slot, VARIADIC options) AS r,
         jsonb_array_elements(r.j->'changes') WITH ORDINALITY AS x(c, i)
   ORDER BY r.n, x.i
$$;
-- Values that pglz cannot shrink (hex digits of md5), > 8 kB: stored out of line, uncompressed.
CREATE FUNCTION pg_temp.incompressible(seed int) RETURNS text LANGUAGE sql AS $$
  SELECT string_agg(md5((seed * 100000 + i)::text), '') FROM generate_series(1, 400) AS i
$$;

CREATE TABLE toasted (id int PRIMARY KEY, note text, big text, other_big text);
CREATE TABLE toasted_full (id int PRIMARY KEY, note text, big text);
ALTER TABLE toasted_full REPLICA IDENTITY FULL;
CREATE PUBLICATION regress_toast_pub FOR TABLE toasted, toasted_full;
SELECT 'init' FROM pg_create_logical_replication_slot('regress_toast', 'trellara');

INSERT INTO toasted VALUES (1, 'inserted', pg_temp.incompressible(1), pg_temp.incompressible(2));
-- The values really are stored out of line, uncompressed.
SELECT pg_column_size(big) > 8000 AS big_out_of_line, pg_column_compression(big) IS NULL AS big_uncompressed,
       pg_column_size(other_big) > 8000 AS other_big_out_of_line
  FROM toasted;
-- Another column changes: both TOASTed values are unchanged (marker, not null, not the value).
UPDATE toasted SET note = 'note changed' WHERE id = 1;
-- One TOASTed value changes: it is sent in full, the other stays unchanged.
UPDATE toasted SET big = pg_temp.incompressible(3) WHERE id = 1;
-- A TOASTed value set to NULL is null; the unchanged one is still the marker.
UPDATE toasted SET big = NULL WHERE id = 1;
-- The key changes while the TOASTed value does not: old key, new key, unchanged marker.
UPDATE toasted SET id = 2 WHERE id = 1;
-- Both TOASTed values change in the same UPDATE, and an UPDATE that rewrites a value with
-- itself (the column is named in SET): Postgres re-uses the TOAST pointer, so it is unchanged.
UPDATE toasted SET big = pg_temp.incompressible(4), other_big = pg_temp.incompressible(5) WHERE id = 2;
UPDATE toasted SET big = big, note = 'self-assigned' WHERE id = 2;
-- DELETE carries the key only.
DELETE FROM toasted WHERE id = 2;
-- A large but compressible value is stored compressed inline: it is sent in full.
INSERT INTO toasted VALUES (3, 'compressible', repeat('x', 100000), NULL);
SELECT pg_column_compression(big) AS compression, pg_column_size(big) < 2000 AS inline FROM toasted WHERE id = 3;
UPDATE toasted SET note = 'compressible, note changed' WHERE id = 3;
SELECT * FROM pg_temp.changes('regress_toast', 'publication', 'regress_toast_pub');
-- The full values sent are exactly the stored ones.
INSERT INTO toasted VALUES (4, 'check', pg_temp.incompressible(6), pg_temp.incompressible(7));
SELECT c->'new'->>'big' = pg_temp.incompressible(6) AS big_exact,
       c->'new'->>'other_big' = pg_temp.incompressible(7) AS other_big_exact
  FROM pg_temp.records('regress_toast', 'publication', 'regress_toast_pub') r,
       jsonb_array_elements(r.j->'changes') c;

-- REPLICA IDENTITY FULL: the old image is the complete old row, TOASTed values included in full;
-- the new tuple still marks the unchanged TOASTed value.
INSERT INTO toasted_full VALUES (1, 'inserted', pg_temp.incompressible(8));
UPDATE toasted_full SET note = 'note changed' WHERE id = 1;
UPDATE toasted_full SET big = pg_temp.incompressible(9) WHERE id = 1;
DELETE FROM toasted_full WHERE id = 1;
SELECT * FROM pg_temp.changes('regress_toast', 'publication', 'regress_toast_pub');

SELECT pg_drop_replication_slot('regress_toast');
DROP PUBLICATION regress_toast_pub;
DROP TABLE toasted, toasted_full;
DROP EXTENSION trellara;
