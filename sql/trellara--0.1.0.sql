-- trellara--0.1.0.sql — the SQL surface of the Trellara extension, version 0.1.0.
--
-- Creates the functions of schema trellara (the schema itself comes from trellara.control) and
-- their privileges: nothing is executable by PUBLIC; read-only functions are granted to
-- pg_monitor; trellara_admin is the role for operating Trellara (see docs/decisions.md).
-- Must never drop or alter objects it did not create, and never grant anything to PUBLIC.

\echo Use "CREATE EXTENSION trellara" to load this file. \quit

CREATE FUNCTION trellara.version()
RETURNS text
AS 'MODULE_PATHNAME', 'trellara_version'
LANGUAGE C STRICT STABLE PARALLEL SAFE;

COMMENT ON FUNCTION trellara.version() IS
  'Version of the loaded trellara shared library (compare with pg_extension.extversion)';

-- STABLE, not IMMUTABLE: the rendering may change between Trellara versions, so it must not be
-- frozen into expression indexes or materialised constants.
CREATE FUNCTION trellara.envelope_json(record bytea)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'trellara_envelope_json'
LANGUAGE C STRICT STABLE PARALLEL SAFE;

COMMENT ON FUNCTION trellara.envelope_json(bytea) IS
  'Renders one Trellara log record (Envelope, Chunk, Manifest or CommitMarker) as JSON; '
  'raises invalid_binary_representation (22P03) for bytes that are not a valid record';

-- trellara_admin: the role that operates Trellara (flows, quarantine replay in later versions).
-- Roles are cluster-wide and cannot belong to an extension, so the script creates it only when
-- it is absent, as NOLOGIN, and DROP EXTENSION leaves it; a DBA grants it to people or to the
-- applier's login role. An existing role of that name is used as it is.
DO $$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'trellara_admin') THEN
    CREATE ROLE trellara_admin NOLOGIN;
  END IF;
END
$$;

REVOKE ALL ON FUNCTION trellara.version() FROM PUBLIC;
REVOKE ALL ON FUNCTION trellara.envelope_json(bytea) FROM PUBLIC;

-- Read-only functions: monitoring roles and Trellara operators.
GRANT USAGE ON SCHEMA trellara TO pg_monitor, trellara_admin;
GRANT EXECUTE ON FUNCTION trellara.version() TO pg_monitor, trellara_admin;
GRANT EXECUTE ON FUNCTION trellara.envelope_json(bytea) TO pg_monitor, trellara_admin;

-- ============================================================================================
-- Flows: a flow captures the tables of one PUBLICATION through its own logical slot
-- (trellara_<name>, plugin trellara) into its own local log directory. The relay launcher (a
-- background worker, needs shared_preload_libraries) starts one relay worker per enabled flow.
-- Flows live in the database named by trellara.database (default postgres).
-- ============================================================================================

CREATE TABLE trellara.flows (
  name          text PRIMARY KEY
                CHECK (name ~ '^[a-z_][a-z0-9_]*$' AND length(name) <= 54),
  publication   name NOT NULL,
  slot_name     name NOT NULL UNIQUE,
  log_directory text NOT NULL UNIQUE CHECK (log_directory LIKE '/%'),
  enabled       boolean NOT NULL DEFAULT true,
  created_at    timestamptz NOT NULL DEFAULT now(),
  -- Set by the relay when it starts the flow's log (its first frame covers the source from this
  -- LSN). A flow with it set whose log holds nothing lost its log directory (continuity).
  log_started_lsn pg_lsn,
  -- How far the relay confirms the slot (docs/broker.md "Source acknowledgement"): 'local', what
  -- the local log holds durably; 'broker_quorum', only what trellara forward has also seen the
  -- broker's quorum acknowledge. Read when the relay starts.
  source_ack    text NOT NULL DEFAULT 'local' CHECK (source_ack IN ('local', 'broker_quorum', 'applied')),
  -- Partitioned scale mode (docs/partitioned.md): 'strict' (one applier, whole transactions) or
  -- 'partitioned' (each change routed to one of `partitions` by relation and key, with the map
  -- version `partition_map_version`). Changed only by trellara.set_partitioning; read when the
  -- relay starts.
  mode          text NOT NULL DEFAULT 'strict' CHECK (mode IN ('strict', 'partitioned')),
  partitions    int NOT NULL DEFAULT 1 CHECK (partitions BETWEEN 1 AND 64),
  partition_map_version int NOT NULL DEFAULT 1 CHECK (partition_map_version >= 1)
);
COMMENT ON TABLE trellara.flows IS 'Trellara flows: publication, slot and log directory of each capture flow';
SELECT pg_catalog.pg_extension_config_dump('trellara.flows', '');
REVOKE ALL ON trellara.flows FROM PUBLIC;
GRANT SELECT ON trellara.flows TO pg_monitor, trellara_admin;

-- What each physical standby's slot sync worker (trellara.standby_slot_sync) last reported about a
-- flow's slot there (issue 41; docs/operations.md section 12): written by the standby over its
-- primary_conninfo through trellara.report_standby_slot, read by check() on the primary to say,
-- per standby, whether a promotion would keep the flow. `standby_slot` is the standby's
-- primary_slot_name (the physical slot on this primary). Not dumped: it is state, not configuration.
CREATE TABLE trellara.standby_slots (
  standby_slot   name NOT NULL,
  flow_slot      name NOT NULL,
  state          text NOT NULL CHECK (state IN ('synced', 'waiting', 'unprotected')),
  confirmed_lsn  pg_lsn,
  restart_lsn    pg_lsn,
  replay_lsn     pg_lsn,
  detail         text NOT NULL,
  reported_at    timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (standby_slot, flow_slot)
);
REVOKE ALL ON trellara.standby_slots FROM PUBLIC;
GRANT SELECT ON trellara.standby_slots TO pg_monitor, trellara_admin;

-- Called by a standby's slot sync worker on the primary, once per change (and at least every
-- 10 s): upserts its row. The role in the standby's primary_conninfo needs trellara_admin.
CREATE FUNCTION trellara.report_standby_slot(standby_slot name, flow_slot name, state text,
                                             confirmed_lsn pg_lsn, restart_lsn pg_lsn, replay_lsn pg_lsn,
                                             detail text)
RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
  INSERT INTO trellara.standby_slots AS s (standby_slot, flow_slot, state, confirmed_lsn, restart_lsn, replay_lsn,
                                           detail, reported_at)
  VALUES ($1, $2, $3, $4, $5, $6, $7, now())
  ON CONFLICT (standby_slot, flow_slot) DO UPDATE
    SET state = excluded.state, confirmed_lsn = excluded.confirmed_lsn, restart_lsn = excluded.restart_lsn,
        replay_lsn = excluded.replay_lsn, detail = excluded.detail, reported_at = excluded.reported_at;
$$;
REVOKE ALL ON FUNCTION trellara.report_standby_slot(name, name, text, pg_lsn, pg_lsn, pg_lsn, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION trellara.report_standby_slot(name, name, text, pg_lsn, pg_lsn, pg_lsn, text)
  TO trellara_admin;

CREATE FUNCTION trellara._relay_status(
  OUT flow text, OUT state text, OUT worker_pid int, OUT log_durable_offset bigint,
  OUT log_durable_lsn pg_lsn, OUT confirmed_lsn pg_lsn, OUT records_written bigint,
  OUT last_error text, OUT last_error_at timestamptz, OUT started_at timestamptz,
  OUT consecutive_failures int)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'trellara_relay_status'
LANGUAGE C STRICT VOLATILE;

CREATE FUNCTION trellara._wake_launcher()
RETURNS void
AS 'MODULE_PATHNAME', 'trellara_wake_launcher'
LANGUAGE C STRICT VOLATILE;

CREATE FUNCTION trellara._stop_flow_worker(flow text, timeout_ms int)
RETURNS boolean
AS 'MODULE_PATHNAME', 'trellara_stop_flow_worker'
LANGUAGE C STRICT VOLATILE;

CREATE FUNCTION trellara._clear_stop_request(flow text)
RETURNS void
AS 'MODULE_PATHNAME', 'trellara_clear_stop_request'
LANGUAGE C STRICT VOLATILE;
REVOKE ALL ON FUNCTION trellara._clear_stop_request(text) FROM PUBLIC;

REVOKE ALL ON FUNCTION trellara._relay_status() FROM PUBLIC;
REVOKE ALL ON FUNCTION trellara._wake_launcher() FROM PUBLIC;
REVOKE ALL ON FUNCTION trellara._stop_flow_worker(text, int) FROM PUBLIC;

-- Refuses, with the remedy, when the relay cannot run here.
CREATE FUNCTION trellara._require_relay()
RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF current_setting('trellara.database', true) IS NULL THEN
    RAISE EXCEPTION 'trellara is not in shared_preload_libraries, so no relay worker can run'
      USING ERRCODE = 'object_not_in_prerequisite_state',
            HINT = 'Add trellara to shared_preload_libraries in postgresql.conf and restart the server.';
  END IF;
  IF current_database() <> current_setting('trellara.database') THEN
    RAISE EXCEPTION 'flows live in database "%" (trellara.database), not in "%"',
      current_setting('trellara.database'), current_database()
      USING ERRCODE = 'object_not_in_prerequisite_state',
            HINT = 'Connect to that database, or set trellara.database in postgresql.conf and restart.';
  END IF;
END
$$;

CREATE FUNCTION trellara._flow(flow_name text)
RETURNS trellara.flows
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE f trellara.flows;
BEGIN
  SELECT * INTO f FROM trellara.flows WHERE name = flow_name;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'flow "%" does not exist', flow_name
      USING ERRCODE = 'undefined_object', HINT = 'SELECT name FROM trellara.flows lists the flows.';
  END IF;
  RETURN f;
END
$$;

CREATE FUNCTION trellara._caller_is_superuser()
RETURNS boolean
AS 'MODULE_PATHNAME', 'trellara_caller_is_superuser'
LANGUAGE C STRICT STABLE;
REVOKE ALL ON FUNCTION trellara._caller_is_superuser() FROM PUBLIC;

-- Trellara's own relations (schema trellara) that a publication names explicitly: FOR TABLE
-- trellara.x or FOR TABLES IN SCHEMA trellara. They are never captured (the output plugin skips
-- every relation of schema trellara, which FOR ALL TABLES also covers); naming them is refused
-- by create_flow() and reported by check() (docs/capture.md).
CREATE FUNCTION trellara._own_relations_named(pubname name)
RETURNS TABLE (relation text)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$
  SELECT format('%I.%I', n.nspname, c.relname)
    FROM pg_publication p
    JOIN pg_publication_rel pr ON pr.prpubid = p.oid
    JOIN pg_class c ON c.oid = pr.prrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace
   WHERE p.pubname = _own_relations_named.pubname AND n.nspname = 'trellara'
  UNION ALL
  SELECT 'TABLES IN SCHEMA trellara'
    FROM pg_publication p
    JOIN pg_publication_namespace pn ON pn.pnpubid = p.oid
    JOIN pg_namespace n ON n.oid = pn.pnnspid
   WHERE p.pubname = _own_relations_named.pubname AND n.nspname = 'trellara'
  ORDER BY 1
$$;
REVOKE ALL ON FUNCTION trellara._own_relations_named(name) FROM PUBLIC;

-- create_flow privileges and preconditions (docs/decisions.md):
-- - log_directory: the default $PGDATA/pg_trellara/<flow> (or any directory under
--   $PGDATA/pg_trellara) for anyone allowed to call create_flow; elsewhere only a superuser, or a
--   directory strictly under trellara.log_directory_root (postgresql.conf, superuser-only).
--   Paths with . or .. components are refused so a prefix check cannot be escaped.
-- - the slot is created first and is not transactional: create_flow refuses to run in a
--   transaction that already wrote (Postgres could not create the slot), and a transaction that
--   rolls back after it leaves the slot behind: check() reports such orphan trellara_ slots with
--   the command that drops them.
CREATE FUNCTION trellara.create_flow(name text, publication text, log_directory text DEFAULT NULL)
RETURNS trellara.flows
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  flow_name text := create_flow.name;
  slot text := 'trellara_' || create_flow.name;
  own_root text := current_setting('data_directory') || '/pg_trellara';
  dir text := coalesce(create_flow.log_directory, own_root || '/' || create_flow.name);
  configured_root text := rtrim(coalesce(current_setting('trellara.log_directory_root', true), ''), '/');
  own_named text;
  f trellara.flows;
BEGIN
  PERFORM trellara._require_relay();
  IF pg_current_xact_id_if_assigned() IS NOT NULL THEN
    RAISE EXCEPTION 'trellara.create_flow(%) cannot run in a transaction that has already written', flow_name
      USING ERRCODE = 'active_sql_transaction',
            DETAIL = 'A flow''s replication slot must be created before its transaction writes anything, '
                     'and slot creation is not transactional.',
            HINT = 'Call create_flow in its own transaction: as a single statement, or as the first statement '
                   'after BEGIN, and commit right after it.';
  END IF;
  IF flow_name IS NULL OR flow_name !~ '^[a-z_][a-z0-9_]*$' OR length(flow_name) > 54 THEN
    RAISE EXCEPTION 'invalid flow name "%"', flow_name
      USING ERRCODE = 'invalid_parameter_value',
            HINT = 'A flow name is 1-54 lowercase letters, digits or underscores, not starting with a digit.';
  END IF;
  IF NOT EXISTS (SELECT FROM pg_publication WHERE pubname = create_flow.publication) THEN
    RAISE EXCEPTION 'publication "%" does not exist', create_flow.publication
      USING ERRCODE = 'undefined_object', HINT = 'Create it first, e.g. CREATE PUBLICATION app FOR TABLE ...';
  END IF;
  IF dir !~ '^/' THEN
    RAISE EXCEPTION 'log directory "%" of flow "%" is not an absolute path', dir, flow_name
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF dir ~ '(^|/)\.\.?(/|$)' OR dir ~ '//' THEN
    RAISE EXCEPTION 'log directory "%" of flow "%" has a ".", ".." or empty path component', dir, flow_name
      USING ERRCODE = 'invalid_parameter_value', HINT = 'Give the directory as a normalized absolute path.';
  END IF;
  dir := rtrim(dir, '/');
  IF NOT starts_with(dir, own_root || '/')
     AND NOT (configured_root <> '' AND starts_with(dir, configured_root || '/'))
     AND NOT trellara._caller_is_superuser() THEN
    RAISE EXCEPTION 'log directory "%" of flow "%" is outside % and only a superuser may choose it', dir, flow_name, own_root
      USING ERRCODE = 'insufficient_privilege',
            DETAIL = 'The relay writes the log as the server''s operating-system user; an arbitrary path would let '
                     'a non-superuser write files anywhere that user can.',
            HINT = 'Omit log_directory to use ' || own_root || '/' || flow_name || ', ask a superuser to create the '
                   'flow, or have a superuser set trellara.log_directory_root in postgresql.conf to a directory '
                   'flows may use and reload the configuration.';
  END IF;
  SELECT string_agg(relation, ', ') INTO own_named FROM trellara._own_relations_named(create_flow.publication);
  IF own_named IS NOT NULL THEN
    RAISE EXCEPTION 'publication "%" names trellara''s own relations (%), which are never captured',
      create_flow.publication, own_named
      USING ERRCODE = 'invalid_parameter_value',
            DETAIL = 'Schema trellara holds the flow catalog and the applier''s state; replaying it on a target '
                     'would overwrite the target''s own state.',
            HINT = 'Remove them: ALTER PUBLICATION ' || quote_ident(create_flow.publication) || ' DROP TABLE ... '
                   '(or DROP TABLES IN SCHEMA trellara). FOR ALL TABLES is fine: it skips them.';
  END IF;
  IF EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = slot)
     AND NOT EXISTS (SELECT FROM trellara.flows WHERE flows.name = flow_name) THEN
    RAISE EXCEPTION 'replication slot "%" already exists but belongs to no flow', slot
      USING ERRCODE = 'duplicate_object',
            DETAIL = 'It is probably left by a create_flow whose transaction rolled back (slot creation is not '
                     'transactional).',
            HINT = format('If nothing else uses it: SELECT pg_drop_replication_slot(%L); then create the flow again.',
                          slot);
  END IF;
  IF EXISTS (SELECT FROM trellara.flows WHERE flows.name = flow_name) THEN
    RAISE EXCEPTION 'flow "%" already exists', flow_name USING ERRCODE = 'duplicate_object';
  END IF;
  IF EXISTS (SELECT FROM trellara.flows WHERE flows.log_directory = dir) THEN
    RAISE EXCEPTION 'log directory "%" is already used by another flow', dir USING ERRCODE = 'duplicate_object';
  END IF;
  -- Slot creation is not transactional and must precede any write of this transaction.
  PERFORM pg_create_logical_replication_slot(slot, 'trellara');
  BEGIN
    INSERT INTO trellara.flows(name, publication, slot_name, log_directory)
      VALUES (flow_name, create_flow.publication, slot, dir)
      RETURNING * INTO f;
  EXCEPTION WHEN OTHERS THEN
    PERFORM pg_drop_replication_slot(slot);
    RAISE;
  END;
  PERFORM trellara._clear_stop_request(flow_name);
  PERFORM trellara._wake_launcher();
  RETURN f;
END
$$;

CREATE FUNCTION trellara.start_flow(name text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  PERFORM trellara._require_relay();
  PERFORM trellara._flow(start_flow.name);
  UPDATE trellara.flows SET enabled = true WHERE flows.name = start_flow.name;
  PERFORM trellara._clear_stop_request(start_flow.name);
  PERFORM trellara._wake_launcher();
END
$$;

-- Sets how far the relay of a flow confirms its slot ('local', 'broker_quorum' or 'applied'); it takes effect
-- when the relay starts next (stop_flow, then start_flow, each in its own transaction).
CREATE FUNCTION trellara.set_source_ack(name text, mode text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  PERFORM trellara._flow(set_source_ack.name);
  IF mode IS NULL OR mode NOT IN ('local', 'broker_quorum', 'applied') THEN
    RAISE EXCEPTION 'invalid source_ack "%" for flow "%"', mode, set_source_ack.name
      USING ERRCODE = 'invalid_parameter_value',
            HINT = '''local'' (the slot follows the local log), ''broker_quorum'' (the slot follows what '
                   'the broker''s quorum acknowledged to trellara forward) or ''applied'' (the slot follows '
                   'what every applier committed on its target: for flows kept on physical standbys).';
  END IF;
  UPDATE trellara.flows SET source_ack = set_source_ack.mode WHERE flows.name = set_source_ack.name;
  RAISE NOTICE 'flow "%": source_ack = % takes effect when its relay starts next', set_source_ack.name, mode
    USING HINT = format('SELECT trellara.stop_flow(%L); then SELECT trellara.start_flow(%L);',
                        set_source_ack.name, set_source_ack.name);
END
$$;
REVOKE ALL ON FUNCTION trellara.set_source_ack(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION trellara.set_source_ack(text, text) TO trellara_admin;

-- The re-partitioning step (docs/partitioned.md "Re-partitioning"): sets a flow's mode and
-- partition count. A change of either makes a new partition map version; transactions the relay
-- captured before keep the map their manifests name. It takes effect when the relay starts next.
CREATE FUNCTION trellara.set_partitioning(name text, mode text, partitions int DEFAULT 1)
RETURNS int
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  f trellara.flows;
  version int;
BEGIN
  f := trellara._flow(set_partitioning.name);
  IF mode IS NULL OR mode NOT IN ('strict', 'partitioned') THEN
    RAISE EXCEPTION 'invalid mode "%" for flow "%"', mode, set_partitioning.name
      USING ERRCODE = 'invalid_parameter_value',
            HINT = '''strict'' (one applier applies whole transactions) or ''partitioned'' (partition appliers '
                   'and a publisher, docs/partitioned.md).';
  END IF;
  IF partitions IS NULL OR partitions < 1 OR partitions > 64 OR (mode = 'strict' AND partitions <> 1) THEN
    RAISE EXCEPTION 'invalid partitions % for flow "%" in mode %', partitions, set_partitioning.name, mode
      USING ERRCODE = 'invalid_parameter_value',
            HINT = 'partitioned mode takes 1..64 partitions; strict mode takes 1.';
  END IF;
  version := f.partition_map_version;
  IF f.mode IS DISTINCT FROM mode OR f.partitions IS DISTINCT FROM partitions THEN
    version := version + 1;
  END IF;
  UPDATE trellara.flows
     SET mode = set_partitioning.mode, partitions = set_partitioning.partitions, partition_map_version = version
   WHERE flows.name = set_partitioning.name;
  RAISE NOTICE 'flow "%": mode %, % partition(s), map version % take effect when its relay starts next',
               set_partitioning.name, mode, partitions, version
    USING HINT = format('SELECT trellara.stop_flow(%L); then SELECT trellara.start_flow(%L); and run one '
                        'partition applier per partition (docs/partitioned.md).',
                        set_partitioning.name, set_partitioning.name);
  RETURN version;
END
$$;
REVOKE ALL ON FUNCTION trellara.set_partitioning(text, text, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION trellara.set_partitioning(text, text, int) TO trellara_admin;

CREATE FUNCTION trellara.stop_flow(name text, timeout_ms int DEFAULT 30000)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  PERFORM trellara._require_relay();
  PERFORM trellara._flow(stop_flow.name);
  UPDATE trellara.flows SET enabled = false WHERE flows.name = stop_flow.name;
  IF NOT trellara._stop_flow_worker(stop_flow.name, timeout_ms) THEN
    RAISE EXCEPTION 'relay worker of flow "%" did not stop within % ms', stop_flow.name, timeout_ms
      USING HINT = 'See the server log and trellara.status(); retry stop_flow.';
  END IF;
END
$$;

-- Drops the flow and its slot; the log directory is kept (it may still hold records a target
-- has not applied) unless remove_log_directory is true, and even then only the files Trellara
-- creates are removed (segments, indexes, LOCK, consumers/ offsets and their lock/temporary
-- files): anything else is left in place and named in a WARNING, with the directory.
CREATE FUNCTION trellara.drop_flow(name text, remove_log_directory boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  f trellara.flows;
  kept text[];
BEGIN
  PERFORM trellara._require_relay();
  f := trellara._flow(drop_flow.name);
  IF NOT trellara._stop_flow_worker(f.name, 30000) THEN
    RAISE EXCEPTION 'relay worker of flow "%" did not stop; not dropping it', f.name;
  END IF;
  IF EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = f.slot_name) THEN
    PERFORM pg_drop_replication_slot(f.slot_name);
  END IF;
  DELETE FROM trellara.flows WHERE flows.name = f.name;
  IF remove_log_directory THEN
    kept := trellara._remove_log_directory(f.log_directory);
    IF kept IS NULL OR cardinality(kept) = 0 THEN
      RAISE NOTICE 'removed log directory "%" of flow "%"', f.log_directory, f.name;
    ELSE
      RAISE WARNING 'log directory "%" of flow "%" is kept: it holds entries trellara did not create or could not remove: %',
        f.log_directory, f.name, array_to_string(kept, ', ')
        USING HINT = 'Its trellara files are removed; check the rest and remove the directory by hand.';
    END IF;
  ELSE
    RAISE NOTICE 'log directory "%" of flow "%" is kept', f.log_directory, f.name;
  END IF;
  PERFORM trellara._wake_launcher();
END
$$;

REVOKE ALL ON FUNCTION trellara._require_relay() FROM PUBLIC;
REVOKE ALL ON FUNCTION trellara._flow(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION trellara.create_flow(text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION trellara.start_flow(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION trellara.stop_flow(text, int) FROM PUBLIC;
REVOKE ALL ON FUNCTION trellara.drop_flow(text, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION trellara.create_flow(text, text, text) TO trellara_admin;
GRANT EXECUTE ON FUNCTION trellara.start_flow(text) TO trellara_admin;
GRANT EXECUTE ON FUNCTION trellara.stop_flow(text, int) TO trellara_admin;
GRANT EXECUTE ON FUNCTION trellara.drop_flow(text, boolean) TO trellara_admin;

CREATE FUNCTION trellara._log_bytes(dir text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'trellara_log_bytes'
LANGUAGE C STRICT VOLATILE;
REVOKE ALL ON FUNCTION trellara._log_bytes(text) FROM PUBLIC;

-- Log retention as core reports it (log/retention.h): segments, bytes, consumers with offset, lag,
-- retained bytes, running, lost; held_by/held_bytes name the slowest live consumer. NULL when the
-- directory does not exist yet; {"error": ...} when it cannot be read.
CREATE FUNCTION trellara._log_retention(dir text)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'trellara_log_retention'
LANGUAGE C STRICT VOLATILE;
REVOKE ALL ON FUNCTION trellara._log_retention(text) FROM PUBLIC;

CREATE FUNCTION trellara._remove_log_directory(dir text)
RETURNS text[]
AS 'MODULE_PATHNAME', 'trellara_remove_log_directory'
LANGUAGE C STRICT VOLATILE;
REVOKE ALL ON FUNCTION trellara._remove_log_directory(text) FROM PUBLIC;

-- One row per flow: relay state, slot positions, WAL retained, what the log holds, last error.
-- Reads the slots first and the relay status board second: a worker publishes the LSN its log
-- durably covers before it confirms the slot, so in this order a row never shows
-- confirmed_flush_lsn past log_durable_lsn (a join could read them the other way round).
CREATE FUNCTION trellara.status()
RETURNS TABLE (
  flow text, state text, enabled boolean, publication name, slot_name name,
  slot_active boolean, confirmed_flush_lsn pg_lsn, restart_lsn pg_lsn, wal_retained_bytes numeric,
  wal_status text, log_directory text, log_durable_offset bigint, log_durable_lsn pg_lsn,
  log_bytes bigint, worker_pid int, records_written bigint, consecutive_failures int,
  last_error text, last_error_at timestamptz,
  log_retained_bytes bigint, log_retained_by text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  slots jsonb;
  board jsonb;
BEGIN
  SELECT coalesce(jsonb_object_agg(rs.slot_name, jsonb_build_object(
           'active', rs.active, 'confirmed', rs.confirmed_flush_lsn, 'restart', rs.restart_lsn,
           'retained', CASE WHEN rs.restart_lsn IS NOT NULL
                            THEN pg_wal_lsn_diff(pg_current_wal_lsn(), rs.restart_lsn) END,
           'wal_status', rs.wal_status)), '{}')
    INTO slots
    FROM pg_replication_slots rs
   WHERE rs.slot_name IN (SELECT f.slot_name FROM trellara.flows f);
  SELECT coalesce(jsonb_object_agg(b.flow, to_jsonb(b)), '{}') INTO board FROM trellara._relay_status() b;
  RETURN QUERY
  SELECT f.name,
         CASE
           WHEN b IS NULL THEN CASE WHEN f.enabled THEN 'starting' ELSE 'stopped' END
           WHEN NOT f.enabled AND b->>'worker_pid' IS NULL THEN 'stopped'
           WHEN f.enabled AND b->>'worker_pid' IS NULL AND b->>'state' = 'failed' THEN 'backoff'
           ELSE b->>'state'
         END,
         f.enabled, f.publication, f.slot_name,
         (sl->>'active')::boolean, (sl->>'confirmed')::pg_lsn, (sl->>'restart')::pg_lsn,
         (sl->>'retained')::numeric, sl->>'wal_status', f.log_directory,
         (b->>'log_durable_offset')::bigint, (b->>'log_durable_lsn')::pg_lsn,
         trellara._log_bytes(f.log_directory),
         (b->>'worker_pid')::int, (b->>'records_written')::bigint, (b->>'consecutive_failures')::int,
         b->>'last_error', (b->>'last_error_at')::timestamptz,
         -- log retention: bytes the slowest live consumer keeps, and its name (NULL: none registered)
         (rt->>'held_bytes')::bigint, rt->>'held_by'
    FROM trellara.flows f
    LEFT JOIN LATERAL (SELECT slots->(f.slot_name::text) AS sl) s ON true
    LEFT JOIN LATERAL (SELECT board->f.name AS b) r ON true
    LEFT JOIN LATERAL (SELECT trellara._log_retention(f.log_directory) AS rt) q ON true
   ORDER BY f.name;
END
$$;
REVOKE ALL ON FUNCTION trellara.status() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION trellara.status() TO pg_monitor, trellara_admin;

-- The relay's counters, one (flow, metric, value) row each, for a metrics exporter (docs/relay.md
-- "Relay metrics"): what each flow's worker last published in shared memory, counted since that
-- worker started. Only flows of trellara.flows; ordered by flow, then in a fixed metric order.
CREATE FUNCTION trellara._relay_metrics(OUT flow text, OUT metric text, OUT value numeric)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'trellara_relay_metrics'
LANGUAGE C STRICT VOLATILE;
REVOKE ALL ON FUNCTION trellara._relay_metrics() FROM PUBLIC;

-- After the relay's counters, three rows read from the server itself, so they are there while no
-- relay runs (issue 41, seed qualification_source_promotion_while_relay_disconnected):
-- source_ack_lag_bytes (WAL written past the slot's confirmed position: what a promotion or a relay
-- restart would replay), source_timeline (this server's timeline) and
-- source_failover_promotion_detected (1 on a server that was promoted: timeline > 1).
CREATE FUNCTION trellara.relay_metrics()
RETURNS TABLE (flow text, metric text, value numeric)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
  WITH server AS (
    SELECT CASE WHEN pg_is_in_recovery() THEN (SELECT timeline_id FROM pg_control_checkpoint())
                ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int END AS timeline,
           CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END AS wal_lsn)
  SELECT u.flow, u.metric, u.value FROM (
    SELECT m.flow, m.metric, m.value, 0 AS part, m.n
      FROM trellara._relay_metrics() WITH ORDINALITY AS m(flow, metric, value, n)
     WHERE m.flow IN (SELECT f.name FROM trellara.flows f)
    UNION ALL
    SELECT f.name, x.metric, x.value, 1, x.n
      FROM trellara.flows f
      LEFT JOIN pg_replication_slots rs ON rs.slot_name = f.slot_name AND rs.slot_type = 'logical'
      CROSS JOIN server
      CROSS JOIN LATERAL (VALUES
        (1::bigint, 'source_ack_lag_bytes', greatest(pg_wal_lsn_diff(server.wal_lsn, rs.confirmed_flush_lsn), 0)),
        (2::bigint, 'source_timeline', server.timeline::numeric),
        (3::bigint, 'source_failover_promotion_detected', CASE WHEN server.timeline > 1 THEN 1 ELSE 0 END::numeric))
        AS x(n, metric, value)
     WHERE x.value IS NOT NULL) u
   ORDER BY u.flow, u.part, u.n
$$;
REVOKE ALL ON FUNCTION trellara.relay_metrics() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION trellara.relay_metrics() TO pg_monitor, trellara_admin;

-- Asks the flow's relay for a progress marker covering the source through `lsn` now, instead of
-- at its next periodic one (trellara.progress_interval). `trellara verify` and `trellara reseed
-- --where` call it for their source point. True when the flow's relay is running to see it.
CREATE FUNCTION trellara._request_progress(flow text, lsn pg_lsn)
RETURNS boolean
AS 'MODULE_PATHNAME', 'trellara_request_progress'
LANGUAGE C STRICT VOLATILE;
REVOKE ALL ON FUNCTION trellara._request_progress(text, pg_lsn) FROM PUBLIC;

CREATE FUNCTION trellara.request_progress(flow text, lsn pg_lsn)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  PERFORM trellara._require_relay();
  PERFORM trellara._flow(request_progress.flow);
  RETURN trellara._request_progress(request_progress.flow, request_progress.lsn);
END
$$;
REVOKE ALL ON FUNCTION trellara.request_progress(text, pg_lsn) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION trellara.request_progress(text, pg_lsn) TO trellara_admin;

-- Source safety preflight of one flow: one row per finding, severity ok | warning | critical.
-- Every non-ok row names the object and the remedy.
CREATE FUNCTION trellara.check(flow text)
RETURNS TABLE (severity text, "check" text, subject text, detail text, remedy text)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  f trellara.flows;
  slot record;
  st record;
  t record;
  keep_mb bigint;
  has_pk boolean;
  opl text;
BEGIN
  f := trellara._flow($1);

  IF current_setting('wal_level') = 'logical' THEN
    RETURN QUERY SELECT 'ok', 'wal_level', 'wal_level', 'wal_level is logical', NULL::text;
  ELSE
    RETURN QUERY SELECT 'critical', 'wal_level', 'wal_level',
      format('wal_level is %s; logical decoding needs logical', current_setting('wal_level')),
      'ALTER SYSTEM SET wal_level = logical; then restart the server';
  END IF;

  IF 'trellara' = ANY (string_to_array(replace(current_setting('shared_preload_libraries'), ' ', ''), ',')) THEN
    RETURN QUERY SELECT 'ok', 'library_preloaded', 'shared_preload_libraries', 'trellara is preloaded', NULL::text;
  ELSE
    RETURN QUERY SELECT 'critical', 'library_preloaded', 'shared_preload_libraries',
      'trellara is not in shared_preload_libraries: no relay worker can run',
      'add trellara to shared_preload_libraries and restart the server';
  END IF;

  opl := current_setting('output_plugin_libraries', true);
  IF opl IS NOT NULL THEN
    IF 'trellara' = ANY (string_to_array(replace(opl, ' ', ''), ',')) THEN
      RETURN QUERY SELECT 'ok', 'output_plugin_allowed', 'output_plugin_libraries',
        'trellara is an allowed output plugin', NULL::text;
    ELSE
      RETURN QUERY SELECT 'critical', 'output_plugin_allowed', 'output_plugin_libraries',
        format('output_plugin_libraries is ''%s'': the slot cannot decode with trellara', opl),
        'ALTER SYSTEM SET output_plugin_libraries = ''' || opl || ', trellara''; SELECT pg_reload_conf()';
    END IF;
  END IF;

  IF EXISTS (SELECT FROM pg_publication WHERE pubname = f.publication) THEN
    RETURN QUERY SELECT 'ok', 'publication', f.publication::text, 'publication exists', NULL::text;
  ELSE
    RETURN QUERY SELECT 'critical', 'publication', f.publication::text,
      'publication does not exist: the relay fails on its first change',
      format('CREATE PUBLICATION %I FOR TABLE ...', f.publication);
  END IF;

  -- A physical standby (issue 41): no relay runs here; what matters is whether the flow's slot is
  -- kept in step with the primary's (trellara.standby_slot_sync), so a promotion can resume the flow.
  IF pg_is_in_recovery() THEN
    SELECT * INTO slot FROM pg_replication_slots WHERE slot_name = f.slot_name;
    IF coalesce(current_setting('trellara.standby_slot_sync', true), 'off') <> 'on' THEN
      RETURN QUERY SELECT 'warning', 'standby_slot', f.slot_name::text,
        'not synced: trellara.standby_slot_sync is off on this standby; after a promotion the flow has no slot',
        'on the standby: ALTER SYSTEM SET trellara.standby_slot_sync = on; restart it (needs primary_slot_name and hot_standby_feedback = on)';
    ELSIF NOT FOUND THEN
      RETURN QUERY SELECT 'warning', 'standby_slot', f.slot_name::text,
        'not synced: the slot does not exist on this standby yet; a promotion now would lose the flow',
        'read the standby''s server log (trellara slot sync: waiting ...); check primary_conninfo, primary_slot_name, hot_standby_feedback';
    ELSE
      RETURN QUERY SELECT 'ok', 'standby_slot', f.slot_name::text,
        format('slot synced: confirmed %s, restart %s, catalog_xmin %s; %s behind this standby''s replay (%s)',
               slot.confirmed_flush_lsn, slot.restart_lsn, slot.catalog_xmin,
               pg_size_pretty(pg_wal_lsn_diff(pg_last_wal_replay_lsn(), slot.confirmed_flush_lsn)),
               pg_last_wal_replay_lsn()), NULL::text;
    END IF;
    IF current_setting('hot_standby_feedback') <> 'on' OR current_setting('primary_slot_name') = '' THEN
      RETURN QUERY SELECT 'warning', 'standby_feedback', 'hot_standby_feedback',
        format('hot_standby_feedback is %s, primary_slot_name is ''%s'': the slot is not synced without both',
               current_setting('hot_standby_feedback'), current_setting('primary_slot_name')),
        'create a physical slot for this standby on the primary, set primary_slot_name and hot_standby_feedback = on';
    END IF;
    RETURN;
  END IF;

  SELECT * INTO slot FROM pg_replication_slots WHERE slot_name = f.slot_name;
  IF NOT FOUND THEN
    RETURN QUERY SELECT 'critical', 'slot', f.slot_name::text, 'replication slot is missing: nothing is captured',
      format('SELECT trellara.drop_flow(%L); SELECT trellara.create_flow(%L, %L); then reseed the target',
             f.name, f.name, f.publication);
  ELSE
    SELECT * INTO st FROM trellara.status() s WHERE s.flow = f.name;
    IF slot.active THEN
      RETURN QUERY SELECT 'ok', 'slot', f.slot_name::text,
        format('slot is active (relay pid %s), confirmed to %s', slot.active_pid, slot.confirmed_flush_lsn), NULL::text;
    ELSIF NOT f.enabled THEN
      RETURN QUERY SELECT 'warning', 'slot', f.slot_name::text,
        format('flow is stopped; the slot is inactive and retains WAL from %s', slot.restart_lsn),
        format('SELECT trellara.start_flow(%L), or drop the flow if it is no longer needed', f.name);
    ELSIF st.state = 'error' THEN
      -- The relay stopped for good (continuity hole, uncapturable transaction): not restarted.
      RETURN QUERY SELECT 'critical', 'relay_error', f.name,
        format('relay is in the error state since %s and is not restarted; the slot is inactive and retains '
               'WAL from %s: %s', st.last_error_at, slot.restart_lsn, split_part(st.last_error, ' HINT: ', 1)),
        coalesce(nullif(split_part(st.last_error, ' HINT: ', 2), ''),
                 format('fix the cause, then SELECT trellara.start_flow(%L)', f.name));
    ELSE
      RETURN QUERY SELECT 'critical', 'slot', f.slot_name::text,
        format('slot is inactive although the flow is enabled (relay state %s%s)', coalesce(st.state, 'unknown'),
               CASE WHEN st.last_error IS NOT NULL
                    THEN format(', last error at %s: %s', st.last_error_at, st.last_error) ELSE '' END),
        'read the last error above and the server log; fix the cause; the launcher restarts the relay with backoff';
    END IF;

    -- In MB whatever unit postgresql.conf used ('50GB'): pg_settings.setting is in the GUC's unit,
    -- current_setting() is not.
    SELECT setting::bigint INTO keep_mb FROM pg_catalog.pg_settings WHERE name = 'max_slot_wal_keep_size';
    IF slot.wal_status IN ('lost', 'unreserved') THEN
      RETURN QUERY SELECT 'critical', 'wal_retention', f.slot_name::text,
        format('slot wal_status is %s: required WAL is (about to be) removed', slot.wal_status),
        'the flow cannot continue: recreate it and reseed the target; raise max_slot_wal_keep_size';
    ELSIF keep_mb = -1 THEN
      RETURN QUERY SELECT 'warning', 'wal_retention', f.slot_name::text,
        format('max_slot_wal_keep_size is unlimited; the slot retains %s of WAL',
               pg_size_pretty(pg_wal_lsn_diff(pg_current_wal_lsn(), slot.restart_lsn))),
        'set max_slot_wal_keep_size so a stalled flow cannot fill the disk, and alert on trellara.status().wal_retained_bytes';
    ELSIF pg_wal_lsn_diff(pg_current_wal_lsn(), slot.restart_lsn) > 0.8 * keep_mb * 1024 * 1024 THEN
      RETURN QUERY SELECT 'warning', 'wal_retention', f.slot_name::text,
        format('slot retains %s, over 80%% of max_slot_wal_keep_size (%s MB)',
               pg_size_pretty(pg_wal_lsn_diff(pg_current_wal_lsn(), slot.restart_lsn)), keep_mb),
        'find why the relay is behind (trellara.status()); raise max_slot_wal_keep_size if needed';
    ELSE
      RETURN QUERY SELECT 'ok', 'wal_retention', f.slot_name::text,
        format('slot retains %s of WAL (limit %s MB)',
               pg_size_pretty(pg_wal_lsn_diff(pg_current_wal_lsn(), slot.restart_lsn)), keep_mb), NULL::text;
    END IF;
  END IF;

  FOR t IN
    SELECT c.oid, pt.schemaname, pt.tablename, c.relreplident, pt.rowfilter,
           (SELECT count(*) FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
                                                     AND a.attgenerated = '') AS ncols,
           coalesce(array_length(pt.attnames, 1), 0) AS nlisted
      FROM pg_publication_tables pt
      JOIN pg_namespace n ON n.nspname = pt.schemaname
      JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename
     WHERE pt.pubname = f.publication AND pt.schemaname <> 'trellara'
     ORDER BY 2, 3
  LOOP
    has_pk := EXISTS (SELECT FROM pg_index i WHERE i.indrelid = t.oid AND i.indisprimary);
    IF t.rowfilter IS NOT NULL OR t.nlisted < t.ncols THEN
      RETURN QUERY SELECT 'critical', 'publication_filter', format('%I.%I', t.schemaname, t.tablename),
        'the publication has a row filter or column list on this table; trellara refuses filtered tables',
        format('ALTER PUBLICATION %I SET TABLE ... without WHERE or column list for this table', f.publication);
    END IF;
    IF t.relreplident = 'n' OR (t.relreplident = 'd' AND NOT has_pk) THEN
      RETURN QUERY SELECT 'critical', 'replica_identity', format('%I.%I', t.schemaname, t.tablename),
        CASE WHEN t.relreplident = 'n' THEN 'REPLICA IDENTITY NOTHING: UPDATE and DELETE carry no key'
             ELSE 'no primary key and REPLICA IDENTITY DEFAULT: UPDATE and DELETE carry no key' END
        || '; the applier cannot find the target row and will quarantine them',
        format('ALTER TABLE %I.%I ADD PRIMARY KEY (...), or ALTER TABLE %I.%I REPLICA IDENTITY FULL',
               t.schemaname, t.tablename, t.schemaname, t.tablename);
    ELSIF t.relreplident = 'f' THEN
      RETURN QUERY SELECT 'ok', 'replica_identity', format('%I.%I', t.schemaname, t.tablename),
        'REPLICA IDENTITY FULL (old rows are logged in full: more WAL)', NULL::text;
    ELSE
      RETURN QUERY SELECT 'ok', 'replica_identity', format('%I.%I', t.schemaname, t.tablename),
        CASE WHEN t.relreplident = 'i' THEN 'REPLICA IDENTITY USING INDEX' ELSE 'primary key' END, NULL::text;
    END IF;
  END LOOP;
  IF NOT FOUND THEN
    RETURN QUERY SELECT 'warning', 'published_tables', f.publication::text,
      'the publication has no tables: the flow captures nothing',
      format('ALTER PUBLICATION %I ADD TABLE ...', f.publication);
  END IF;

  RETURN QUERY SELECT * FROM trellara._check_log_retention(f);

  RETURN QUERY SELECT * FROM trellara._check_failover(f);

  RETURN QUERY SELECT 'warning', 'own_relations', o.relation,
      'the publication names this trellara relation; trellara never captures its own relations (schema trellara)',
      format('ALTER PUBLICATION %I DROP %s', f.publication,
             CASE WHEN o.relation LIKE 'TABLES IN SCHEMA %' THEN o.relation ELSE 'TABLE ' || o.relation END)
    FROM trellara._own_relations_named(f.publication) o;

  -- Slots named like a flow's, decoding with trellara, that no flow owns: left by a create_flow
  -- whose transaction rolled back, or by a flow dropped by hand. They retain WAL forever.
  RETURN QUERY SELECT 'warning', 'orphan_slot', rs.slot_name::text,
      format('replication slot %s (plugin trellara) belongs to no flow and retains WAL from %s%s',
             rs.slot_name, rs.restart_lsn, CASE WHEN rs.active THEN format(' (in use by pid %s)', rs.active_pid) ELSE '' END),
      format('if nothing uses it: SELECT pg_drop_replication_slot(%L)', rs.slot_name)
    FROM pg_replication_slots rs
   WHERE rs.plugin = 'trellara' AND rs.slot_name LIKE 'trellara\_%'
     AND rs.database = current_database()
     AND NOT EXISTS (SELECT FROM trellara.flows fl WHERE fl.slot_name = rs.slot_name)
   ORDER BY rs.slot_name;

  -- A `trellara snapshot`, `verify` or `reseed` session of this flow (application_name
  -- 'trellara-<command>/<flow>[/<worker>]', docs/snapshot.md) that has held a source snapshot for over ten
  -- minutes (the setting trellara.snapshot_hold_warning, an interval, changes that): its xmin holds back vacuum on every table of the database, and a verify's temporary
  -- slot retains WAL, for as long as it runs.
  RETURN QUERY SELECT 'warning', 'snapshot_holding', format('pid %s (%s)', a.pid, a.application_name),
      format('has held a source snapshot since %s (for %s)%s', a.xact_start,
             date_trunc('second', now() - a.xact_start),
             coalesce((SELECT format('; its temporary slot %s retains %s of WAL', rs.slot_name,
                                     pg_size_pretty(pg_wal_lsn_diff(pg_current_wal_lsn(), rs.restart_lsn)))
                         FROM pg_replication_slots rs WHERE rs.active_pid = a.pid LIMIT 1), '')),
      'vacuum cannot remove rows deleted since then: let it finish (trellara status shows its progress), or stop '
      'it (it resumes by chunk: rerun the same command) and run it with more --jobs or at a quieter time'
    FROM pg_stat_activity a
   WHERE split_part(a.application_name, '/', 1) IN ('trellara-snapshot', 'trellara-verify', 'trellara-reseed')
     AND split_part(a.application_name, '/', 2) = f.name
     AND a.backend_xmin IS NOT NULL
     AND a.xact_start < now() - coalesce(nullif(current_setting('trellara.snapshot_hold_warning', true), ''),
                                         '10 minutes')::interval
   ORDER BY a.pid;

END
$$;
REVOKE ALL ON FUNCTION trellara.check(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION trellara.check(text) TO pg_monitor, trellara_admin;

CREATE FUNCTION trellara._log_inspect(dir text)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'trellara_log_inspect'
LANGUAGE C STRICT VOLATILE;
REVOKE ALL ON FUNCTION trellara._log_inspect(text) FROM PUBLIC;

-- The flow's log as `trellara log inspect --dir` reports it: segments, records, first_offset,
-- last_valid_offset, torn_tail_bytes, index_status, consumers, corruption, log_bytes.
CREATE FUNCTION trellara.log_inspect(flow text)
RETURNS jsonb
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ SELECT trellara._log_inspect((trellara._flow(flow)).log_directory) $$;
REVOKE ALL ON FUNCTION trellara.log_inspect(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION trellara.log_inspect(text) TO pg_monitor, trellara_admin;

-- Log retention (docs/log.md "Consumers and retention"): the registered consumers of a flow's log
-- and the removal of one that is gone for good. Only the relay deletes segments.
CREATE FUNCTION trellara._unregister_consumer(dir text, consumer text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'trellara_unregister_consumer'
LANGUAGE C STRICT VOLATILE;
REVOKE ALL ON FUNCTION trellara._unregister_consumer(text, text) FROM PUBLIC;

-- One row per registered consumer: the next offset it needs, how far behind the log's end it is,
-- the bytes of log kept for it, whether its applier is running, whether the ceiling marked it lost.
CREATE FUNCTION trellara.consumers(flow text)
RETURNS TABLE (consumer text, next_offset bigint, lag_records bigint, retained_bytes bigint, running boolean,
               lost boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  rt jsonb := trellara._log_retention((trellara._flow($1)).log_directory);
BEGIN
  IF rt ? 'error' THEN
    RAISE EXCEPTION 'cannot read the consumers of flow %: %', $1, rt->>'error'
      USING HINT = 'Check that the log directory is readable by the postgres OS user.';
  END IF;
  RETURN QUERY
  SELECT c->>'name', (c->>'next_offset')::bigint, (c->>'lag_records')::bigint, (c->>'retained_bytes')::bigint,
         (c->>'active')::boolean, (c->>'lost')::boolean
    FROM jsonb_array_elements(coalesce(rt->'consumers', '[]')) c
   ORDER BY 1;
END
$$;
REVOKE ALL ON FUNCTION trellara.consumers(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION trellara.consumers(text) TO pg_monitor, trellara_admin;

-- Removes a consumer so that it no longer retains the log (its applier must be stopped). The relay
-- deletes what only it retained within seconds. A lost consumer is unregistered after its reseed.
CREATE FUNCTION trellara.unregister_consumer(flow text, consumer text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF NOT trellara._unregister_consumer((trellara._flow($1)).log_directory, $2) THEN
    RAISE EXCEPTION 'flow % has no consumer named %', $1, $2
      USING HINT = format('SELECT * FROM trellara.consumers(%L) lists them.', $1);
  END IF;
  RETURN true;
END
$$;
REVOKE ALL ON FUNCTION trellara.unregister_consumer(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION trellara.unregister_consumer(text, text) TO trellara_admin;

-- Whether the negative control defect.<point> is on in this backend (functions/test_defects.cpp):
-- only with TRELLARA_FAULTS and trellara.enable_test_defects, i.e. never in production.
CREATE FUNCTION trellara._test_defect(point text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'trellara_test_defect'
LANGUAGE C STRICT VOLATILE;
REVOKE ALL ON FUNCTION trellara._test_defect(text) FROM PUBLIC;

-- check() rows on a primary about promotion (issue 41; docs/operations.md section 12), per physical
-- standby slot of this primary: failover_slot ok (the standby keeps the flow's slot, synced within
-- the last minute), or warning "disabled" (no report from it: trellara.standby_slot_sync is off there,
-- or trellara is not preloaded — a promotion of it ends the flow) or "unsynced" (its worker waits, has
-- no feedback, or stopped reporting — a promotion now may not retain the CDC boundary). Then the
-- flow's posture: source_ack (only 'applied' keeps the standby's slot at what the targets hold) and
-- trellara.standby_slot_names (without it a target can get ahead of a promoted standby). No standby:
-- one ok row saying so.
CREATE FUNCTION trellara._check_failover(f trellara.flows)
RETURNS TABLE (severity text, "check" text, subject text, detail text, remedy text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  ps record;
  r trellara.standby_slots;
  primary_confirmed pg_lsn;
  hold text := coalesce(current_setting('trellara.standby_slot_names', true), '');
  standbys int := 0;
BEGIN
  SELECT confirmed_flush_lsn INTO primary_confirmed FROM pg_replication_slots WHERE slot_name = f.slot_name;
  FOR ps IN SELECT slot_name, active, restart_lsn FROM pg_replication_slots WHERE slot_type = 'physical' ORDER BY 1
  LOOP
    standbys := standbys + 1;
    SELECT * INTO r FROM trellara.standby_slots s WHERE s.standby_slot = ps.slot_name AND s.flow_slot = f.slot_name;
    IF trellara._test_defect('failover_posture_unchecked') THEN
      -- Negative control (tests only): every standby reported synced, its report unread.
      RETURN QUERY SELECT 'ok', 'failover_slot', ps.slot_name::text,
        format('synced: the standby on physical slot %s keeps slot %s', ps.slot_name, f.slot_name), NULL::text;
    ELSIF NOT FOUND THEN
      RETURN QUERY SELECT 'warning', 'failover_slot', ps.slot_name::text,
        format('disabled: the standby on physical slot %s (%s) keeps no copy of slot %s (trellara.standby_slot_sync is '
               'off there, or trellara is not preloaded): a promotion of that standby ends flow %s, and nothing its '
               'new primary commits is captured', ps.slot_name, CASE WHEN ps.active THEN 'streaming' ELSE 'not connected' END,
               f.slot_name, f.name),
        'on the standby: ALTER SYSTEM SET shared_preload_libraries = ''trellara''; ALTER SYSTEM SET '
        'trellara.standby_slot_sync = on; hot_standby_feedback = on, primary_slot_name set; restart it; its role '
        'in primary_conninfo needs trellara_admin here';
    ELSIF r.state <> 'synced' OR r.reported_at < now() - interval '60 seconds' THEN
      RETURN QUERY SELECT 'warning', 'failover_slot', ps.slot_name::text,
        format('unsynced: the standby on physical slot %s last reported slot %s %s at %s (%s ago)%s: %s; a promotion '
               'now may not retain the CDC boundary', ps.slot_name, f.slot_name, r.state, r.reported_at,
               date_trunc('second', now() - r.reported_at),
               CASE WHEN r.confirmed_lsn IS NOT NULL
                    THEN format(', confirmed %s against %s here', r.confirmed_lsn, primary_confirmed) ELSE '' END,
               r.detail),
        'read the standby''s server log (trellara slot sync); check its primary_conninfo, primary_slot_name and '
        'hot_standby_feedback; do not promote it until this row is ok';
    ELSE
      RETURN QUERY SELECT 'ok', 'failover_slot', ps.slot_name::text,
        format('synced: the standby on physical slot %s keeps slot %s at confirmed %s (%s behind this primary''s %s), '
               'reported %s ago', ps.slot_name, f.slot_name, r.confirmed_lsn,
               pg_size_pretty(greatest(pg_wal_lsn_diff(primary_confirmed, r.confirmed_lsn), 0)), primary_confirmed,
               date_trunc('second', now() - r.reported_at)), NULL::text;
    END IF;
  END LOOP;
  IF standbys = 0 THEN
    RETURN QUERY SELECT 'ok', 'failover_slot', f.slot_name::text,
      'no physical standby slot on this server: no promotion to prepare for', NULL::text;
    RETURN;
  END IF;
  IF f.source_ack <> 'applied' THEN
    RETURN QUERY SELECT 'warning', 'failover_boundary', f.name,
      format('source_ack is %s: the slot (and every standby''s copy of it) moves past what the local log holds, '
             'before the targets have it; after an unplanned promotion what the old primary logged but no applier '
             'committed is lost with its disk', f.source_ack),
      format('SELECT trellara.set_source_ack(%L, ''applied''); then stop_flow / start_flow', f.name);
  END IF;
  IF hold = '' THEN
    RETURN QUERY SELECT 'warning', 'failover_hold', 'trellara.standby_slot_names',
      'trellara.standby_slot_names is empty: the relay captures WAL a standby has not flushed, so a target can get '
      'ahead of a promoted standby (the applier then fails closed and the target must be reseeded)',
      format('ALTER SYSTEM SET trellara.standby_slot_names = %L; SELECT pg_reload_conf()',
             (SELECT string_agg(slot_name, ',') FROM pg_replication_slots WHERE slot_type = 'physical'));
  ELSE
    RETURN QUERY SELECT 'ok', 'failover_hold', 'trellara.standby_slot_names',
      format('capture waits for standby slot(s) %s', hold), NULL::text;
  END IF;
END
$$;
REVOKE ALL ON FUNCTION trellara._check_failover(trellara.flows) FROM PUBLIC;

-- check() rows about log retention: lost consumers (critical), a log over
-- trellara.log_retention_warn_size (warning, naming the consumer holding it), otherwise ok.
CREATE FUNCTION trellara._check_log_retention(f trellara.flows)
RETURNS TABLE (severity text, "check" text, subject text, detail text, remedy text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  rt jsonb := trellara._log_retention(f.log_directory);
  warn_bytes bigint := pg_size_bytes(coalesce(current_setting('trellara.log_retention_warn_size', true), '1GB'));
  max_bytes bigint := pg_size_bytes(coalesce(current_setting('trellara.log_retention_max_size', true), '-1'));
  c jsonb;
  holder jsonb;
BEGIN
  IF rt IS NULL THEN
    RETURN QUERY SELECT 'ok', 'log_retention', f.name, 'the log directory does not exist yet', NULL::text;
    RETURN;
  END IF;
  IF rt ? 'error' THEN
    RETURN QUERY SELECT 'critical', 'log_retention', f.name,
      'cannot read the log''s consumers, so the relay deletes nothing: ' || (rt->>'error'),
      'repair or remove the named consumer file (trellara log consumers --dir ' || f.log_directory || ')';
    RETURN;
  END IF;
  FOR c IN SELECT * FROM jsonb_array_elements(rt->'consumers') LOOP
    IF (c->>'lost')::boolean THEN
      RETURN QUERY SELECT 'critical', 'log_consumer_lost', c->>'name',
        format('consumer %s was marked lost by trellara.log_retention_max_size: it needed offset %s, the log now '
               'starts at %s; its applier refuses to continue', c->>'name', c->>'next_offset', c->>'log_starts_at'),
        format('reseed the target (trellara reseed), then SELECT trellara.unregister_consumer(%L, %L) and start '
               'the applier again', f.name, c->>'name');
    END IF;
    IF c->>'name' = rt->>'held_by' THEN holder := c; END IF;
  END LOOP;
  IF jsonb_array_length(rt->'consumers') = 0 THEN
    RETURN QUERY SELECT CASE WHEN (rt->>'log_bytes')::bigint > warn_bytes THEN 'warning' ELSE 'ok' END,
      'log_retention', f.name,
      format('no consumer is registered, so nothing is deleted; the log holds %s in %s segment(s)',
             pg_size_pretty((rt->>'log_bytes')::bigint), rt->>'segments'),
      CASE WHEN (rt->>'log_bytes')::bigint > warn_bytes
           THEN 'start the applier (trellara apply --config F registers consumer "applier" on its first start), '
                'or drop the flow if nothing will read it' END;
  ELSIF holder IS NOT NULL AND (rt->>'held_bytes')::bigint > warn_bytes THEN
    RETURN QUERY SELECT 'warning', 'log_retention', holder->>'name',
      format('consumer %s retains %s of log (next offset %s, %s records behind, running: %s), over '
             'trellara.log_retention_warn_size (%s)%s', holder->>'name', pg_size_pretty((rt->>'held_bytes')::bigint),
             holder->>'next_offset', holder->>'lag_records', holder->>'active', pg_size_pretty(warn_bytes),
             CASE WHEN max_bytes > 0 THEN format('; at %s it will be marked lost', pg_size_pretty(max_bytes))
                  ELSE '; no ceiling is set (trellara.log_retention_max_size)' END),
      format('find why %s is behind or stopped (trellara status --config F); if it is gone for good: '
             'SELECT trellara.unregister_consumer(%L, %L)', holder->>'name', f.name, holder->>'name');
  ELSE
    RETURN QUERY SELECT 'ok', 'log_retention', coalesce(holder->>'name', f.name),
      format('the log holds %s in %s segment(s)%s', pg_size_pretty((rt->>'log_bytes')::bigint), rt->>'segments',
             CASE WHEN holder IS NOT NULL THEN format('; the slowest consumer, %s, retains %s', holder->>'name',
                                                      pg_size_pretty((rt->>'held_bytes')::bigint)) ELSE '' END),
      NULL::text;
  END IF;
END
$$;
REVOKE ALL ON FUNCTION trellara._check_log_retention(trellara.flows) FROM PUBLIC;

-- ============================================================================================
-- DDL capture (docs/schema-changes.md "Capture"): two event triggers write each DDL command on a
-- table that a publication contains into the WAL as a transactional logical message with prefix
-- 'trellara.ddl' (a protobuf Ddl: steps, and the table's definition after the command), so the
-- output plugin emits it in order with the DML of the same transaction. Created last, so that the
-- rest of this script runs without them. They are members of the extension (DROP EXTENSION
-- removes them). Event triggers call their function without an EXECUTE check, so the functions
-- stay unexecutable by anyone else. A DBA may ALTER EVENT TRIGGER ... DISABLE them only knowing
-- that DDL run meanwhile is invisible to the applier (it then quarantines the drift).
-- ============================================================================================
CREATE FUNCTION trellara.ddl_command_end()
RETURNS event_trigger
AS 'MODULE_PATHNAME', 'trellara_ddl_command_end'
LANGUAGE C;
REVOKE ALL ON FUNCTION trellara.ddl_command_end() FROM PUBLIC;

CREATE FUNCTION trellara.sql_drop()
RETURNS event_trigger
AS 'MODULE_PATHNAME', 'trellara_sql_drop'
LANGUAGE C;
REVOKE ALL ON FUNCTION trellara.sql_drop() FROM PUBLIC;

CREATE EVENT TRIGGER trellara_ddl_command_end ON ddl_command_end
  EXECUTE FUNCTION trellara.ddl_command_end();
CREATE EVENT TRIGGER trellara_sql_drop ON sql_drop
  EXECUTE FUNCTION trellara.sql_drop();
COMMENT ON EVENT TRIGGER trellara_ddl_command_end IS
  'Trellara: records DDL on published tables in the WAL for the output plugin (trellara.ddl messages)';
COMMENT ON EVENT TRIGGER trellara_sql_drop IS
  'Trellara: records DROP of published tables in the WAL for the output plugin (trellara.ddl messages)';
