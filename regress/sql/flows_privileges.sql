-- flows_privileges: what create_flow/drop_flow/check allow and refuse (docs/decisions.md):
-- log directories outside $PGDATA/pg_trellara need a superuser, create_flow refuses a transaction
-- that already wrote, a rolled-back create_flow's slot is reported by check() with its drop
-- command, drop_flow(..., true) removes only Trellara's own files, and a publication naming
-- Trellara's own relations is refused. Paths under $PGDATA are shown as $PGDATA.
\c postgres
\set VERBOSITY terse
SET client_min_messages = warning;  -- drop_flow's NOTICEs name log directories under $PGDATA
CREATE EXTENSION trellara;
CREATE TABLE priv_orders (id bigint PRIMARY KEY, note text);
CREATE PUBLICATION priv_pub FOR TABLE priv_orders;
CREATE ROLE regress_flow_operator LOGIN IN ROLE trellara_admin;
GRANT USAGE ON SCHEMA trellara TO regress_flow_operator;
-- Only so the test can name $PGDATA paths (and mask them in messages) as this role.
GRANT pg_read_all_settings TO regress_flow_operator;

-- Runs `sql`; returns 'ok' or the SQLSTATE and message (with $PGDATA for the data directory).
CREATE FUNCTION attempt(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE sql;
  RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ': ' || replace(SQLERRM, current_setting('data_directory'), '$PGDATA');
END $$;
GRANT EXECUTE ON FUNCTION attempt(text) TO regress_flow_operator;
CREATE FUNCTION wait_for_state(f text, wanted text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE s text;
BEGIN
  FOR i IN 1..300 LOOP
    SELECT state INTO s FROM trellara.status() WHERE flow = f;
    IF s = wanted THEN RETURN s; END IF;
    PERFORM pg_sleep(0.1);
  END LOOP;
  RETURN s;
END $$;

-- 1. log_directory: a non-superuser operator gets the default or a directory under
-- $PGDATA/pg_trellara, never an arbitrary path; a superuser may choose one.
SET ROLE regress_flow_operator;
SELECT attempt($$SELECT trellara.create_flow('priv_elsewhere', 'priv_pub', '/tmp/regress_trellara_elsewhere')$$);
SELECT attempt($$SELECT trellara.create_flow('priv_escape', 'priv_pub',
                 current_setting('data_directory') || '/pg_trellara/../../escape')$$);
SELECT attempt($$SELECT trellara.create_flow('priv_default', 'priv_pub')$$);
SELECT attempt(format($$SELECT trellara.create_flow('priv_inside', 'priv_pub', %L)$$,
                      current_setting('data_directory') || '/pg_trellara/custom_inside'));
RESET ROLE;
SELECT name, replace(log_directory, current_setting('data_directory'), '$PGDATA') AS log_directory
  FROM trellara.flows ORDER BY name;
SELECT trellara.drop_flow('priv_default');
SELECT trellara.drop_flow('priv_inside', true);
SELECT attempt($$SELECT trellara.create_flow('priv_super', 'priv_pub', '/tmp/regress_trellara_super')$$);
SELECT trellara.drop_flow('priv_super', true);

-- 2. create_flow inside a transaction that already wrote: refused with the reason, no slot.
BEGIN;
INSERT INTO priv_orders VALUES (1, 'written first');
SELECT trellara.create_flow('priv_late', 'priv_pub');
ROLLBACK;
SELECT count(*) AS late_slots FROM pg_replication_slots WHERE slot_name = 'trellara_priv_late';

-- 3. A create_flow whose transaction rolls back leaves its slot (slot creation is not
-- transactional): check() of any flow reports it with the command that drops it, and
-- create_flow of that name says so instead of failing on the slot.
SELECT name FROM trellara.create_flow('priv_keep', 'priv_pub');
BEGIN;
SELECT name FROM trellara.create_flow('priv_orphan', 'priv_pub');
ROLLBACK;
SELECT severity, subject, remedy FROM trellara.check('priv_keep') WHERE "check" = 'orphan_slot';
SELECT attempt($$SELECT trellara.create_flow('priv_orphan', 'priv_pub')$$);
SELECT 'dropped' FROM pg_drop_replication_slot('trellara_priv_orphan');
SELECT count(*) AS orphan_rows FROM trellara.check('priv_keep') WHERE "check" = 'orphan_slot';

-- 4. drop_flow(..., true) removes Trellara's files only: a file someone else put in the log
-- directory stays, and so does the directory, with a WARNING naming what was kept.
SELECT wait_for_state('priv_keep', 'running');
INSERT INTO priv_orders VALUES (2, 'logged');
DO $$
BEGIN
  FOR i IN 1..300 LOOP
    EXIT WHEN (SELECT log_durable_offset IS NOT NULL FROM trellara.status() WHERE flow = 'priv_keep');
    PERFORM pg_sleep(0.1);
  END LOOP;
END $$;
SELECT log_directory AS keep_dir FROM trellara.flows WHERE name = 'priv_keep' \gset
\set notes_path :keep_dir '/notes.txt'
COPY (SELECT 'operator notes') TO :'notes_path';
SELECT count(*) FILTER (WHERE f LIKE 'segment-%') > 0 AS has_segments,
       count(*) FILTER (WHERE f = 'notes.txt') AS notes
  FROM pg_ls_dir(:'keep_dir') f;
SET client_min_messages = error;  -- the WARNING names the log directory under $PGDATA
SELECT trellara.drop_flow('priv_keep', remove_log_directory => true);
SET client_min_messages = warning;
SELECT f AS left_in_log_directory FROM pg_ls_dir(:'keep_dir') f ORDER BY f;

-- 5. A publication that names Trellara's own relations is refused; one added later is reported.
CREATE PUBLICATION priv_own_table FOR TABLE trellara.flows, priv_orders;
CREATE PUBLICATION priv_own_schema FOR TABLES IN SCHEMA trellara;
SELECT attempt($$SELECT trellara.create_flow('priv_own', 'priv_own_table')$$);
SELECT attempt($$SELECT trellara.create_flow('priv_own', 'priv_own_schema')$$);
CREATE PUBLICATION priv_all FOR ALL TABLES;
SELECT name FROM trellara.create_flow('priv_all', 'priv_all');
-- FOR ALL TABLES: trellara.flows is not among the checked tables.
SELECT "check", subject FROM trellara.check('priv_all') WHERE "check" IN ('replica_identity', 'own_relations')
 ORDER BY 1, 2;
SELECT trellara.drop_flow('priv_all', true);
SELECT name FROM trellara.create_flow('priv_later', 'priv_pub');
ALTER PUBLICATION priv_pub ADD TABLE trellara.flows;
SELECT severity, subject, remedy FROM trellara.check('priv_later') WHERE "check" = 'own_relations';
ALTER PUBLICATION priv_pub DROP TABLE trellara.flows;
SELECT trellara.drop_flow('priv_later', true);

DROP PUBLICATION priv_pub, priv_own_table, priv_own_schema, priv_all;
DROP TABLE priv_orders;
DROP FUNCTION attempt(text), wait_for_state(text, text);
DROP EXTENSION trellara;
DROP OWNED BY regress_flow_operator;
DROP ROLE regress_flow_operator;
