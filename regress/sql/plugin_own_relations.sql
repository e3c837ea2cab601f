-- plugin_own_relations: Trellara's own relations (schema trellara: the flow catalog, and the
-- applier's state tables on a server that is also a target) are never captured, however a
-- publication covers them: FOR ALL TABLES, FOR TABLES IN SCHEMA trellara or FOR TABLE
-- trellara.x. The user's tables in the same transactions are captured as usual.
\set VERBOSITY terse
CREATE EXTENSION trellara;
CREATE FUNCTION pg_temp.changes(slot name, VARIADIC options text[])
RETURNS TABLE (rec bigint, op text, relation text, new jsonb) LANGUAGE sql AS $$
  SELECT r.n, c->>'op', coalesce(c->>'relation', c->>'relations'), c->'new'
    FROM pg_logical_slot_peek_binary_changes(slot, NULL, NULL, VARIADIC options)
         WITH ORDINALITY AS r(lsn, xid, data, n),
         jsonb_array_elements(trellara.envelope_json(r.data)->'changes') WITH ORDINALITY AS x(c, i)
   ORDER BY r.n, x.i
$$;

-- As on a server that is both a source and a target: the applier's state lives in schema trellara.
CREATE TABLE trellara.applied_transactions (flow text, commit_lsn pg_lsn, PRIMARY KEY (flow, commit_lsn));
CREATE TABLE own_app (id int PRIMARY KEY, v text);
CREATE PUBLICATION own_all FOR ALL TABLES;
CREATE PUBLICATION own_schema FOR TABLES IN SCHEMA trellara;
CREATE PUBLICATION own_table FOR TABLE trellara.flows, trellara.applied_transactions, own_app;
SELECT 'init' FROM pg_create_logical_replication_slot('regress_own', 'trellara');

BEGIN;
INSERT INTO own_app VALUES (1, 'user row');
INSERT INTO trellara.flows(name, publication, slot_name, log_directory)
  VALUES ('own_x', 'own_all', 'trellara_own_x', '/nonexistent/own_x');
INSERT INTO trellara.applied_transactions VALUES ('own_x', '0/1');
COMMIT;
BEGIN;
UPDATE trellara.flows SET enabled = false WHERE name = 'own_x';
DELETE FROM trellara.applied_transactions;
UPDATE own_app SET v = 'updated' WHERE id = 1;
COMMIT;
TRUNCATE trellara.applied_transactions, own_app;
DELETE FROM trellara.flows WHERE name = 'own_x';

-- Every change each publication yields: only public.own_app, never trellara.*.
SELECT p AS publication, coalesce(string_agg(op || ' ' || relation, ', ' ORDER BY rec, op), '(nothing)') AS captured
  FROM unnest(ARRAY['own_all', 'own_schema', 'own_table']) p
  LEFT JOIN LATERAL pg_temp.changes('regress_own', 'publication', p) ON true
 GROUP BY p ORDER BY p;
-- Nothing of schema trellara in any record, through all three publications at once.
SELECT count(*) AS own_changes
  FROM pg_temp.changes('regress_own', 'publication', 'own_all,own_schema,own_table')
 WHERE relation LIKE '%trellara.%';
SELECT new FROM pg_temp.changes('regress_own', 'publication', 'own_all') WHERE op = 'insert';

SELECT 'dropped' FROM pg_drop_replication_slot('regress_own');
DROP PUBLICATION own_all, own_schema, own_table;
DROP TABLE own_app, trellara.applied_transactions;
DROP EXTENSION trellara;
