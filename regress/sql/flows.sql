-- flows: the flow SQL API (create/stop/start/drop), trellara.status() and trellara.check() shapes.
-- Flows live in trellara.database (postgres on harness clusters), so this suite switches there.
\c postgres
CREATE EXTENSION trellara;
CREATE TABLE flow_orders (id bigint PRIMARY KEY, note text);
CREATE TABLE flow_nokey (x int);
CREATE PUBLICATION flow_pub FOR TABLE flow_orders, flow_nokey;

-- Waits (up to 30 s) until the flow's relay reports the state wanted.
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

-- Bad arguments are refused with the reason.
SELECT trellara.create_flow('Bad-Name', 'flow_pub');
SELECT trellara.create_flow('app', 'no_such_pub');
SELECT trellara.create_flow('app', 'flow_pub', 'relative/dir');

SELECT name, publication, slot_name, enabled, log_directory LIKE '%/pg_trellara/app' AS default_dir
  FROM trellara.create_flow('app', 'flow_pub');
SELECT trellara.create_flow('app', 'flow_pub');
SELECT slot_name, plugin, slot_type FROM pg_replication_slots WHERE slot_name = 'trellara_app';
SELECT wait_for_state('app', 'running');

INSERT INTO flow_orders SELECT g, 'n' || g FROM generate_series(1, 10) g;
-- The log holds the transaction once it is durable; the slot is confirmed only that far.
DO $$
BEGIN
  FOR i IN 1..300 LOOP
    EXIT WHEN (SELECT log_durable_offset IS NOT NULL FROM trellara.status() WHERE flow = 'app');
    PERFORM pg_sleep(0.1);
  END LOOP;
END $$;
SELECT flow, state, enabled, publication, slot_name, slot_active,
       confirmed_flush_lsn IS NOT NULL AS has_confirmed, restart_lsn IS NOT NULL AS has_restart,
       wal_retained_bytes >= 0 AS retained_known, log_durable_offset >= 0 AS has_durable_offset,
       confirmed_flush_lsn <= log_durable_lsn AS confirmed_within_log, log_bytes > 0 AS log_written,
       worker_pid IS NOT NULL AS has_worker, last_error
  FROM trellara.status();
-- relay_metrics(): the relay's counters, one row per metric (values that vary are not shown).
SELECT metric, value > 0 AS positive
  FROM trellara.relay_metrics()
 WHERE flow = 'app' AND metric IN ('worker_up', 'records_written', 'payload_bytes_appended', 'fsyncs_completed',
                                   'log_durable_lsn', 'streamed_transactions', 'stream_spilled_bytes')
 ORDER BY metric COLLATE "C";

-- log_inspect(): the same facts as `trellara log inspect`.
SELECT j->>'index_status' AS index_status, (j->>'segments')::int AS segments, (j->>'records')::int > 0 AS has_records,
       (j->>'first_offset')::int AS first_offset, (j->>'torn_tail_bytes')::int AS torn_tail_bytes,
       j->'corruption' AS corruption, j->'consumers' AS consumers, (j->>'writer_active')::bool AS writer_active
  FROM trellara.log_inspect('app') AS j;
SELECT trellara.log_inspect('nope');

-- check(): every finding with its severity (values that vary are not shown).
SELECT severity, "check", subject FROM trellara.check('app') ORDER BY "check", subject;
SELECT count(*) FILTER (WHERE severity <> 'ok' AND remedy IS NULL) AS findings_without_remedy
  FROM trellara.check('app');
SELECT * FROM trellara.check('nope');

-- Log retention: no consumer registered yet (nothing is deleted, status() names nobody);
-- unregistering is trellara_admin's, refused for an unknown name; listing is pg_monitor's too.
SELECT log_retained_by IS NULL AS no_consumer, log_retained_bytes > 0 AS log_retained FROM trellara.status();
SELECT * FROM trellara.consumers('app');
SELECT trellara.unregister_consumer('app', 'nobody');
SELECT trellara.unregister_consumer('app', '../x');
SELECT p.proname, has_function_privilege('public', p.oid, 'execute') AS public_can,
       has_function_privilege('pg_monitor', p.oid, 'execute') AS monitor_can,
       has_function_privilege('trellara_admin', p.oid, 'execute') AS admin_can
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = 'trellara' AND p.proname IN ('consumers', 'unregister_consumer', '_log_retention',
                                                 '_unregister_consumer', '_check_log_retention',
                                                 'relay_metrics', '_relay_metrics')
 ORDER BY 1;

SELECT trellara.stop_flow('app');
SELECT flow, state, enabled, slot_active FROM trellara.status();
SELECT trellara.start_flow('app');
SELECT wait_for_state('app', 'running');
SET client_min_messages = warning;  -- the NOTICE names the (temporary) log directory
SELECT trellara.drop_flow('app', remove_log_directory => true);
RESET client_min_messages;
SELECT count(*) AS flows FROM trellara.flows;
SELECT count(*) AS slots FROM pg_replication_slots WHERE slot_name = 'trellara_app';

DROP PUBLICATION flow_pub;
DROP TABLE flow_orders, flow_nokey;
DROP FUNCTION wait_for_state(text, text);
DROP EXTENSION trellara;
