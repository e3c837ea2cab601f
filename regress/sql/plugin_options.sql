-- plugin_options: the plugin's options (publication, chunk_changes, flow, messages,
-- skip_through_lsn) are checked when decoding starts; an unknown or malformed option is an ERROR
-- naming it, and the slot stays usable. Also: identifiers that need quoting (reserved words,
-- embedded quotes, mixed case, non-ASCII, 63-byte names) are captured by their exact names.
\set VERBOSITY default
CREATE EXTENSION trellara;

CREATE FUNCTION pg_temp.records(slot name, VARIADIC options text[])
RETURNS TABLE (n bigint, j jsonb) LANGUAGE sql AS $$
  SELECT r.n, trellara.envelope_json(r.data)
    FROM pg_logical_slot_get_binary_changes(slot, NULL, NULL, VARIADIC options)
         WITH ORDINALITY AS r(lsn, xid, data, n)
   ORDER BY r.n
$$;

CREATE TABLE opt (id int PRIMARY KEY);
CREATE PUBLICATION regress_options_pub FOR TABLE opt;
SELECT 'init' FROM pg_create_logical_replication_slot('regress_options', 'trellara');
INSERT INTO opt VALUES (1);

-- Missing, unknown and malformed options.
SELECT count(*) FROM pg_logical_slot_peek_binary_changes('regress_options', NULL, NULL);
SELECT count(*) FROM pg_logical_slot_peek_binary_changes('regress_options', NULL, NULL, 'publication', '');
SELECT count(*) FROM pg_logical_slot_peek_binary_changes('regress_options', NULL, NULL, 'publication', 'a,,b');
SELECT count(*) FROM pg_logical_slot_peek_binary_changes('regress_options', NULL, NULL, 'publication', NULL);
SELECT count(*) FROM pg_logical_slot_peek_binary_changes('regress_options', NULL, NULL, 'publication', 'regress_options_pub', 'proto_version', '1');
SELECT count(*) FROM pg_logical_slot_peek_binary_changes('regress_options', NULL, NULL, 'publication', 'regress_options_pub', 'partitions', '0');
SELECT count(*) FROM pg_logical_slot_peek_binary_changes('regress_options', NULL, NULL, 'publication', 'regress_options_pub', 'partitions', '65');
SELECT count(*) FROM pg_logical_slot_peek_binary_changes('regress_options', NULL, NULL, 'publication', 'regress_options_pub', 'map_version', '0');
SELECT count(*) FROM pg_logical_slot_peek_binary_changes('regress_options', NULL, NULL, 'publication', 'regress_options_pub', 'chunk_changes', '0');
SELECT count(*) FROM pg_logical_slot_peek_binary_changes('regress_options', NULL, NULL, 'publication', 'regress_options_pub', 'chunk_changes', '1048577');
SELECT count(*) FROM pg_logical_slot_peek_binary_changes('regress_options', NULL, NULL, 'publication', 'regress_options_pub', 'chunk_changes', '12abc');
SELECT count(*) FROM pg_logical_slot_peek_binary_changes('regress_options', NULL, NULL, 'publication', 'regress_options_pub', 'chunk_changes', '-5');
SELECT count(*) FROM pg_logical_slot_peek_binary_changes('regress_options', NULL, NULL, 'publication', 'regress_options_pub', 'chunk_changes', '99999999999999999999');
SELECT count(*) FROM pg_logical_slot_peek_binary_changes('regress_options', NULL, NULL, 'publication', 'regress_options_pub', 'messages', 'maybe');
SELECT count(*) FROM pg_logical_slot_peek_binary_changes('regress_options', NULL, NULL, 'publication', 'regress_options_pub', 'skip_through_lsn', 'not an lsn');
-- Valid values of every option are accepted together.
SELECT count(*) FROM pg_logical_slot_peek_binary_changes('regress_options', NULL, NULL, 'publication', 'regress_options_pub',
                                                         'chunk_changes', '1', 'messages', 'off', 'flow', 'f', 'skip_through_lsn', '0/0');
-- The errors consumed nothing: the change is still there.
SELECT n, j->'changes' AS changes FROM pg_temp.records('regress_options', 'publication', 'regress_options_pub');

-- skip_through_lsn: transactions whose commit LSN is at or before it are not emitted (they are
-- already in the log); the ones after are.
INSERT INTO opt VALUES (2);
INSERT INTO opt VALUES (3);
CREATE TEMP TABLE peeked AS
  SELECT lsn FROM pg_logical_slot_peek_binary_changes('regress_options', NULL, NULL, 'publication', 'regress_options_pub');
SELECT count(*) AS transactions FROM peeked;
SELECT n, j->'changes' AS changes
  FROM pg_temp.records('regress_options', 'publication', 'regress_options_pub',
                       'skip_through_lsn', (SELECT min(lsn)::text FROM peeked));

-- The trellara.chunk_changes setting is the default for chunk_changes.
SET trellara.chunk_changes = 0;
SET trellara.chunk_changes = 2;
INSERT INTO opt VALUES (4), (5), (6);
SELECT n, j->>'type' AS type FROM pg_temp.records('regress_options', 'publication', 'regress_options_pub');
RESET trellara.chunk_changes;

-- Publication names follow SQL identifier rules: unquoted names fold to lower case, quoted ones
-- keep their case and may contain commas and spaces.
CREATE PUBLICATION "Regress Mixed, Case" FOR TABLE opt;
INSERT INTO opt VALUES (7);
SELECT count(*) FROM pg_logical_slot_peek_binary_changes('regress_options', NULL, NULL, 'publication', 'Regress Mixed, Case');
SELECT n, j->'changes' AS changes FROM pg_temp.records('regress_options', 'publication', '"Regress Mixed, Case"');
INSERT INTO opt VALUES (8);
SELECT n, j->'changes' AS changes FROM pg_temp.records('regress_options', 'publication', 'REGRESS_OPTIONS_PUB');

-- Identifiers that need quoting are captured by their exact names, in the changes, the counts
-- and the relation descriptions.
CREATE SCHEMA "Sch""ema ü";
CREATE TABLE "order" ("select" int PRIMARY KEY, "a""b" text, "MixedCase" text, "ünïcødé 名前" text,
                      "c23456789012345678901234567890123456789012345678901234567890123" text);
CREATE TABLE "Sch""ema ü"."t23456789012345678901234567890123456789012345678901234567890123" (id int PRIMARY KEY);
CREATE TABLE "CamelTable" ("Id" int PRIMARY KEY);
CREATE PUBLICATION regress_names_pub FOR TABLE "order", "Sch""ema ü"."t23456789012345678901234567890123456789012345678901234567890123", "CamelTable";
INSERT INTO "order" VALUES (1, 'quote"d', 'mixed', 'unicode', 'long');
UPDATE "order" SET "select" = 2;
INSERT INTO "Sch""ema ü"."t23456789012345678901234567890123456789012345678901234567890123" VALUES (1);
INSERT INTO "CamelTable" VALUES (1);
TRUNCATE "order", "CamelTable";
CREATE TEMP TABLE named AS SELECT * FROM pg_temp.records('regress_options', 'publication', 'regress_names_pub');
SELECT n, c AS change FROM named, jsonb_array_elements(j->'changes') c ORDER BY n;
SELECT DISTINCT r->>'schema' AS schema, r->>'name' COLLATE "C" AS name, octet_length(r->>'name') AS name_bytes,
       (SELECT string_agg(c->>'name', ' | ') FROM jsonb_array_elements(r->'columns') c) AS columns
  FROM named, jsonb_array_elements(j->'relations') r ORDER BY 2;
SELECT DISTINCT c->>'relation' COLLATE "C" AS counted FROM named, jsonb_array_elements(j->'counts') c ORDER BY 1;

SELECT pg_drop_replication_slot('regress_options');
DROP PUBLICATION regress_options_pub, "Regress Mixed, Case", regress_names_pub;
DROP TABLE opt, "order", "CamelTable";
DROP SCHEMA "Sch""ema ü" CASCADE;
DROP EXTENSION trellara;
