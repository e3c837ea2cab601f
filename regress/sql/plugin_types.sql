-- plugin_types: values are the text of each type's output function, under settings the plugin
-- pins for decoding (DateStyle ISO, IntervalStyle postgres, extra_float_digits 3, bytea_output
-- hex, TimeZone UTC, search_path empty) whatever the decoding session's own settings are; NULL is
-- JSON null, distinct from the empty string; every value reads back as the source value.
\set VERBOSITY terse
CREATE EXTENSION trellara;

CREATE FUNCTION pg_temp.records(slot name, VARIADIC options text[])
RETURNS TABLE (n bigint, j jsonb) LANGUAGE sql AS $$
  SELECT r.n, trellara.envelope_json(r.data)
    FROM pg_logical_slot_get_binary_changes(slot, NULL, NULL, VARIADIC options)
         WITH ORDINALITY AS r(lsn, xid, data, n)
   ORDER BY r.n
$$;

CREATE TYPE mood AS ENUM ('sad', 'ok', 'very "happy"');
CREATE DOMAIN posint AS int CHECK (VALUE > 0);
CREATE TYPE pair AS (a int, b text);
CREATE TABLE types (
  id int PRIMARY KEY,
  i int, b bigint, s smallint,
  n numeric, n_nan numeric, n_scaled numeric(30,10),
  f8 float8, f8_third float8, f8_negzero float8, f8_inf float8, f8_neginf float8, f8_nan float8, f4 float4,
  t text, t_quotes text, t_backslash text, t_control text, t_nonascii text, vc varchar(10), ch char(5),
  by bytea, bo bool, u uuid,
  d date, d_bc date, ts timestamp, ts_inf timestamp, tstz timestamptz, iv interval, iv_neg interval,
  js json, jb jsonb,
  ia int[], ia2 int[], ta text[],
  e mood, dm posint, cp pair, r int4range, r_empty int4range, tr tstzrange
);
CREATE PUBLICATION regress_types_pub FOR TABLE types;
SELECT 'init' FROM pg_create_logical_replication_slot('regress_types', 'trellara');

INSERT INTO types VALUES (
  1,
  -2147483648, 9223372036854775807, -32768,
  12345678901234567890.123456789012345678901, 'NaN', 3.14159,
  0.1, 1.0 / 3, '-0', 'Infinity', '-Infinity', 'NaN', 3.1415927,
  'plain', $$it's "quoted"$$, E'back\\slash and \\n (not a newline)', E'tab\there\nnewline\r\ncrlf\x01',
  'café 日本語 😀', 'short', 'ab',
  '\x00ff5c2722'::bytea, true, 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
  '2024-02-29', '0044-03-15 BC', '2024-02-29 13:45:56.789012', 'infinity',
  '2024-02-29 13:45:56.789012+05:30', '1 year 2 mons 3 days 04:05:06.789', '-1 days +02:00:00',
  '{"b": 1,   "a": [1, 2, "x\"y"]}', '{"b": 1,   "a": [1, 2, "x\"y"], "c": null}',
  '{1,NULL,3}', '{{1,2},{3,4}}', ARRAY['a b', 'c"d', NULL, 'NULL', '', 'e\f'],
  'very "happy"', 42, ROW(1, 'x, "y"'), '[1,10)', 'empty',
  tstzrange('2024-01-01 00:00+00', '2024-01-02 00:00+00'));
-- NULL in every column, then empty values: NULL is JSON null, never "".
INSERT INTO types (id) VALUES (2);
INSERT INTO types (id, t, vc, ch, by, js, jb, ia, ta) VALUES (3, '', '', '', '', '""', '{}', '{}', '{}');

-- The decoding session's own settings must not shape the values.
SET DateStyle = 'SQL, DMY';
SET IntervalStyle = 'sql_standard';
SET extra_float_digits = 0;
SET bytea_output = 'escape';
SET TimeZone = 'Asia/Kolkata';
SET search_path = regress_no_such_schema;
CREATE TEMP TABLE captured AS
  SELECT n, c.change FROM pg_temp.records('regress_types', 'publication', 'regress_types_pub') r,
         jsonb_array_elements(r.j->'changes') c(change);
-- The session's settings are back as they were.
SELECT current_setting('DateStyle') AS datestyle, current_setting('IntervalStyle') AS intervalstyle,
       current_setting('extra_float_digits') AS extra_float_digits, current_setting('bytea_output') AS bytea_output,
       current_setting('TimeZone') AS timezone, current_setting('search_path') AS search_path;
RESET ALL;

SELECT (change->'new'->>'id')::int AS id, col, value
  FROM captured, jsonb_each(change->'new') AS e(col, value)
 ORDER BY 1, (SELECT attnum FROM pg_attribute WHERE attrelid = 'types'::regclass AND attname = col);

-- Every value reads back (through the type's input function) as the value stored at the source:
-- the columns that do not are listed (none).
CREATE FUNCTION pg_temp.not_reading_back(new jsonb) RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
  col record;
  same boolean;
  bad text[] := '{}';
BEGIN
  FOR col IN SELECT a.attname, format_type(a.atttypid, a.atttypmod) AS type
               FROM pg_attribute a WHERE a.attrelid = 'types'::regclass AND a.attnum > 0 ORDER BY a.attnum LOOP
    EXECUTE format('SELECT %L::%s::text IS NOT DISTINCT FROM (SELECT %I::text FROM types WHERE id = %s)',
                   new->>col.attname, col.type, col.attname, new->>'id') INTO same;
    IF NOT same THEN bad := bad || col.attname::text; END IF;
  END LOOP;
  RETURN bad;
END
$$;
SELECT (change->'new'->>'id')::int AS id, pg_temp.not_reading_back(change->'new') AS not_reading_back
  FROM captured ORDER BY 1;

-- The relation is described with its column types; user types schema-qualified.
INSERT INTO types (id) VALUES (4);
SELECT c->>'name' AS name, c->>'type' AS type, c->'typmod' AS typmod, c->'key' AS key
  FROM pg_temp.records('regress_types', 'publication', 'regress_types_pub') r,
       jsonb_array_elements(r.j->'relations'->0->'columns') c;

SELECT pg_drop_replication_slot('regress_types');
DROP PUBLICATION regress_types_pub;
DROP TABLE types;
DROP TYPE mood, pair;
DROP DOMAIN posint;
DROP EXTENSION trellara;
