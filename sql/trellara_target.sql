-- trellara_target.sql — the target-side state of the applier, defined once (DESIGN §2, §6, §7).
--
-- The `trellara` command embeds this file at build time (CMake generates trellara_target_sql.h
-- from it) and runs it on every `trellara apply` start, after taking the flow's advisory lock, so
-- every statement here must be idempotent (IF NOT EXISTS / OR REPLACE) and must never drop or
-- rewrite existing state. It never touches user tables.

CREATE SCHEMA IF NOT EXISTS trellara;

-- One row per source transaction committed on the target, written in the same target transaction
-- as its changes and the replication-origin progress: the dedup authority. A row for
-- (flow, commit_lsn) with a different xid, origin or checksum is a conflict, never a duplicate.
CREATE TABLE IF NOT EXISTS trellara.applied_transactions (
  flow         text           NOT NULL,
  commit_lsn   pg_lsn         NOT NULL,
  xid          bigint         NOT NULL,
  origin_sysid numeric(20, 0) NOT NULL,
  checksum     bytea          NOT NULL,
  applied_at   timestamptz    NOT NULL DEFAULT now(),
  PRIMARY KEY (flow, commit_lsn)
);

-- The source timelines the applier has applied a flow from (issue 41, docs/operations.md section 12):
-- a row is written before the first transaction of a log started on that timeline is applied. A
-- log of a promoted server (its TIMELINE names the branch point) is applied only if nothing was
-- applied past that point from an earlier timeline (core DecideTimelineContinuity).
CREATE TABLE IF NOT EXISTS trellara.source_timelines (
  flow            text        NOT NULL,
  timeline        integer     NOT NULL CHECK (timeline >= 1),
  parent_timeline integer,
  branch_lsn      pg_lsn,
  recorded_at     timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (flow, timeline)
);

-- Transactions the applier could not apply safely. Written in its own transaction after the
-- rollback; the applier halts at the first one until its state is replay_ready.
CREATE TABLE IF NOT EXISTS trellara.quarantine (
  flow                 text           NOT NULL,
  commit_lsn           pg_lsn         NOT NULL,
  xid                  bigint         NOT NULL,
  origin_sysid         numeric(20, 0) NOT NULL,
  reason               text           NOT NULL,
  sqlstate             text,
  detail               text           NOT NULL,
  checksum             bytea          NOT NULL,
  attempts             integer        NOT NULL,
  state                text           NOT NULL
                       CHECK (state IN ('quarantined', 'replay_ready', 'resolved')),
  message              text           NOT NULL,
  next_step            text           NOT NULL,
  first_quarantined_at timestamptz    NOT NULL DEFAULT now(),
  last_failed_at       timestamptz    NOT NULL DEFAULT now(),
  replay_ready_at      timestamptz,
  resolved_at          timestamptz,
  PRIMARY KEY (flow, commit_lsn)
);

-- One row per flow: where the applier is and why it stopped. Written when the applier starts,
-- catches up, halts or stops (not per transaction: the origin progress is the per-transaction
-- checkpoint).
CREATE TABLE IF NOT EXISTS trellara.apply_status (
  flow                     text        PRIMARY KEY,
  state                    text        NOT NULL
                           CHECK (state IN ('running', 'caught_up', 'blocked', 'stopped')),
  applied_commit_lsn       pg_lsn,
  consumer_offset          bigint      NOT NULL,
  applied_transactions     bigint      NOT NULL,
  skipped_duplicates       bigint      NOT NULL,
  last_error               text,
  updated_at               timestamptz NOT NULL DEFAULT now()
);

-- The applier's row-count check (core RowCheckedSql): every planned INSERT/UPDATE/DELETE must
-- touch exactly one row. Raising here, inside the statement, makes a wrong match abort the
-- transaction on the server before its COMMIT runs — the applier pipelines COMMIT behind the
-- statement, so a check in the client would come too late. SQLSTATE TR001 = no row, TR002 =
-- several (the count in DETAIL): a class of their own, so that no trigger's or function's error
-- (PL/pgSQL's own P0002/P0003, say) is taken for a wrong match; the applier turns them into
-- zero_rows_matched / many_rows_matched quarantines.
CREATE OR REPLACE FUNCTION trellara.require_one_row(matched bigint)
RETURNS void LANGUAGE plpgsql AS $fn$
-- No SET search_path: it would cost a GUC save/restore per change, and the body names only
-- built-in operators, which pg_catalog (always searched first) resolves.
BEGIN
  IF matched = 1 THEN
    RETURN;
  ELSIF matched = 0 THEN
    RAISE EXCEPTION 'the change matched no row on the target' USING ERRCODE = 'TR001', DETAIL = '0';
  ELSE
    RAISE EXCEPTION 'the change matched % rows on the target, expected exactly one', matched
      USING ERRCODE = 'TR002', DETAIL = matched::text;
  END IF;
END
$fn$;

-- The evidence check of a grouped batch formed without reading the evidence first (docs/apply.md
-- "Evidence inside the batch"): the applier took every member as never seen, and calls this right
-- after the registry check, inside the batch's own transaction, with the members' commit LSNs. It
-- raises (SQLSTATE TR012) when that is not so for one of them: the flow's origin progress is at or
-- past it, or it has a dedup row or a quarantine row (whatever its xid or state). The batch then
-- rolls back and the applier reads the evidence and decides as for any batch. Each LSN is looked up
-- through the primary key.
CREATE OR REPLACE FUNCTION trellara.require_unapplied(flow_name text, commits pg_lsn[], origin_name text)
RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE
  progress pg_lsn := pg_catalog.pg_replication_origin_progress(origin_name, false);
  c pg_lsn;
BEGIN
  FOREACH c IN ARRAY commits LOOP
    IF progress IS NOT NULL AND c <= progress THEN
      RAISE EXCEPTION 'commit % of flow % is at or below the origin progress % on the target', c, flow_name, progress
        USING ERRCODE = 'TR012';
    END IF;
    PERFORM 1 FROM trellara.applied_transactions a WHERE a.flow = flow_name AND a.commit_lsn = c;
    IF FOUND THEN
      RAISE EXCEPTION 'commit % of flow % already has a dedup row on the target', c, flow_name
        USING ERRCODE = 'TR012';
    END IF;
    PERFORM 1 FROM trellara.quarantine q WHERE q.flow = flow_name AND q.commit_lsn = c;
    IF FOUND THEN
      RAISE EXCEPTION 'commit % of flow % has a quarantine row on the target', c, flow_name
        USING ERRCODE = 'TR012';
    END IF;
  END LOOP;
END
$fn$;

-- The guard of superseded updates (docs/apply.md "Superseded updates in a group"): a grouped batch
-- that left out UPDATEs overwritten later in the same group calls this last, before its COMMIT,
-- with every relation the group writes. It raises (SQLSTATE TR011, the 1-based positions of the
-- refusing relations in DETAIL) when a trigger or rule on one of them fires for the applier's
-- changes: ENABLE ALWAYS or ENABLE REPLICA, any event, as the apply session runs with
-- session_replication_role = replica; internal (foreign-key) triggers do not fire then. Such a
-- trigger must see every UPDATE of its own table and, since it may read any table, every row as
-- in-order apply leaves it, so the group rolls back and is applied one source transaction at a
-- time with nothing left out, and the applier stops leaving out any UPDATE of that relation or
-- across a write of it. Called after the group's statements, it sees any trigger enabled before
-- they locked the relation. (Until 2026-12-02 it was require_no_update_triggers and looked at
-- UPDATE triggers of the relations with a left-out UPDATE only.)
-- A table and every partition or inheritance child a write to it reaches (the guards below look
-- for triggers, rules and indexes on all of them: a trigger on one partition fires for rows the
-- applier writes through the parent).
CREATE OR REPLACE FUNCTION trellara.relation_tree(rel oid)
RETURNS oid[] LANGUAGE sql STABLE AS $fn$
  WITH RECURSIVE t(oid) AS (SELECT rel
                            UNION SELECT i.inhrelid FROM pg_catalog.pg_inherits i JOIN t ON i.inhparent = t.oid)
  SELECT array_agg(t.oid) FROM t
$fn$;

DROP FUNCTION IF EXISTS trellara.require_no_update_triggers(text[]);
CREATE OR REPLACE FUNCTION trellara.require_no_replica_triggers(relations text[])
RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE
  positions text;
  found text;
BEGIN
  -- Each relation's tree once (trellara.relation_tree: the table and every partition or
  -- inheritance child a write to it reaches).
  WITH r AS (SELECT u.name, u.pos, trellara.relation_tree(u.name::regclass) AS tree
               FROM unnest(relations) WITH ORDINALITY AS u(name, pos))
  SELECT string_agg(DISTINCT r.pos::text, ','),
         string_agg(DISTINCT format('%s (%s)', r.name, f.what), ', ')
    INTO positions, found
    FROM r
    CROSS JOIN LATERAL (
      SELECT 'trigger ' || t.tgname AS what FROM pg_catalog.pg_trigger t
       WHERE t.tgrelid = ANY (r.tree) AND NOT t.tgisinternal AND t.tgenabled IN ('A', 'R')
      UNION ALL
      SELECT 'rule ' || w.rulename FROM pg_catalog.pg_rewrite w
       WHERE w.ev_class = ANY (r.tree) AND w.ev_enabled IN ('A', 'R') AND w.ev_type <> '1'
      UNION ALL
      -- Two guarded relations that reach a same table on the target (one is a partition or
      -- inheritance child of the other): writes of one meet rows of the other, so the order
      -- between them is seen.
      SELECT 'shares a table with ' || o.name FROM r AS o WHERE o.pos <> r.pos AND o.tree && r.tree) AS f;
  IF positions IS NOT NULL THEN
    RAISE EXCEPTION 'the target sees the order of the replicated writes of % (a trigger or rule firing for them, '
                    'or a table two of them reach)', found
      USING ERRCODE = 'TR011', DETAIL = positions;
  END IF;
END
$fn$;

-- Batched UPDATEs of a chunked transaction (docs/apply.md "Chunked transactions"). The applier
-- asks once per relation and statement shape, inside the transaction, whether a run of UPDATEs
-- that each match a distinct key and leave it unchanged may go as one statement
-- (UPDATE ... FROM unnest(<one array per column>)), which changes the rows in an order of the
-- server's choosing instead of the source's. That is the same result unless something on the
-- target observes the order: a trigger or rule firing for replicated changes (ENABLE ALWAYS or
-- REPLICA), or a unique index or exclusion constraint other than one on exactly the key columns
-- (a swap of unique values between two rows may pass in one order and fail in another), on the
-- table or any partition or inheritance child the UPDATE reaches. Returns no row when the
-- UPDATEs must go one at a time for such a trigger, rule, index or constraint; else a row per
-- column of `columns` found on the relation, in their order: format_type(atttypid, -1), the type
-- each value is cast to from text (core value_types.h BatchCastType decides); a column not found
-- is one row fewer, and the UPDATEs go one at a time. ROW EXCLUSIVE
-- is taken first, as the UPDATEs would, so no trigger can be enabled between the answer and the
-- statement.
DROP FUNCTION IF EXISTS trellara.update_batch_types(text, text[], text[]);
CREATE OR REPLACE FUNCTION trellara.batch_column_types(relation text, columns text[], key_columns text[])
RETURNS TABLE (type_name text) LANGUAGE plpgsql AS $fn$
DECLARE
  rel oid := relation::regclass;
  tree oid[];
BEGIN
  EXECUTE 'LOCK TABLE ' || relation || ' IN ROW EXCLUSIVE MODE';
  tree := trellara.relation_tree(rel);
  IF EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
              WHERE t.tgrelid = ANY (tree) AND NOT t.tgisinternal AND t.tgenabled IN ('A', 'R'))
     OR EXISTS (SELECT 1 FROM pg_catalog.pg_rewrite w
                 WHERE w.ev_class = ANY (tree) AND w.ev_enabled IN ('A', 'R') AND w.ev_type <> '1')
     OR EXISTS (SELECT 1 FROM pg_catalog.pg_index i
                 WHERE i.indrelid = ANY (tree) AND (i.indisunique OR i.indisexclusion)
                   AND (i.indpred IS NOT NULL OR i.indexprs IS NOT NULL OR i.indisexclusion
                        OR ARRAY(SELECT a.attname::text FROM pg_catalog.pg_attribute a
                                  WHERE a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey::int2[]) ORDER BY 1)
                           IS DISTINCT FROM ARRAY(SELECT k FROM unnest(key_columns) AS k ORDER BY 1)))
     OR EXISTS (SELECT 1 FROM pg_catalog.pg_constraint c
                 WHERE c.conrelid = ANY (tree) AND c.contype = 'x') THEN
    RETURN;
  END IF;
  RETURN QUERY
    SELECT pg_catalog.format_type(a.atttypid, -1)
      FROM unnest(columns) WITH ORDINALITY AS c(name, pos)
      JOIN pg_catalog.pg_attribute a ON a.attrelid = rel AND a.attname = c.name AND a.attnum > 0
                                    AND NOT a.attisdropped
     ORDER BY c.pos;
END
$fn$;

-- ALTER TYPE ... RENAME VALUE carried from the source (core ddl_apply EnumRenameValue; docs/
-- schema-changes.md "Enum labels"): renames the label when the enum still has the old one; nothing
-- when it already has the new one and not the old (an earlier record of another table using the
-- enum did it, or a person); otherwise fails naming both labels.
CREATE OR REPLACE FUNCTION trellara.rename_enum_value(enum_type regtype, old_label text, new_label text)
RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE
  has_old boolean := EXISTS (SELECT 1 FROM pg_catalog.pg_enum WHERE enumtypid = enum_type AND enumlabel = old_label);
  has_new boolean := EXISTS (SELECT 1 FROM pg_catalog.pg_enum WHERE enumtypid = enum_type AND enumlabel = new_label);
BEGIN
  IF has_old THEN
    EXECUTE pg_catalog.format('ALTER TYPE %s RENAME VALUE %L TO %L', enum_type, old_label, new_label);
  ELSIF NOT has_new THEN
    RAISE EXCEPTION 'enum % has neither label % (renamed on the source) nor %', enum_type,
      pg_catalog.quote_literal(old_label), pg_catalog.quote_literal(new_label)
      USING HINT = 'add or rename the label on the target by hand, then mark the transaction replay-ready';
  END IF;
END
$fn$;

-- The row check of a merged INSERT of a grouped batch (docs/apply.md "Merged statements in a
-- group"): called only when it inserted another number of rows than it holds (a trigger or rule
-- on the target skipped or added rows).
CREATE OR REPLACE FUNCTION trellara.require_rows(inserted bigint, expected bigint)
RETURNS void LANGUAGE plpgsql AS $fn$
BEGIN
  IF inserted <> expected THEN
    RAISE EXCEPTION 'a merged INSERT of % rows inserted % on the target', expected, inserted
      USING ERRCODE = 'TR002', DETAIL = inserted::text;
  END IF;
END
$fn$;

-- The row check of a batched UPDATE: called only when the rows it changed are not each of the
-- batch's rows once (`changed` holds the 1-based batch row of every row changed). Raises for the
-- first batch row matched no time (TR001) or several times (TR002), as require_one_row does for
-- one change, with that row's number in HINT.
CREATE OR REPLACE FUNCTION trellara.require_each_row_once(changed bigint[], expected bigint)
RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE
  row_no bigint;
  matched bigint;
BEGIN
  SELECT r.n, (SELECT count(*) FROM unnest(changed) AS c(n) WHERE c.n = r.n)
    INTO row_no, matched
    FROM generate_series(1::bigint, expected) AS r(n)
   WHERE (SELECT count(*) FROM unnest(changed) AS c(n) WHERE c.n = r.n) <> 1
   ORDER BY r.n LIMIT 1;
  IF row_no IS NULL THEN
    RETURN;
  ELSIF matched = 0 THEN
    RAISE EXCEPTION 'the change matched no row on the target' USING ERRCODE = 'TR001', DETAIL = '0',
      HINT = row_no::text;
  ELSE
    RAISE EXCEPTION 'the change matched % rows on the target, expected exactly one', matched
      USING ERRCODE = 'TR002', DETAIL = matched::text, HINT = row_no::text;
  END IF;
END
$fn$;

-- Marks exactly one quarantined boundary replay-ready; refuses (raises) for anything else, so a
-- mistyped xid or LSN never releases another transaction. Same rules as core's DecideReplayReady.
-- The flow may be named; it must be when flows applying into this database quarantined the same
-- (xid, commit LSN) — possible with sources on different servers — and the two-argument form
-- refuses that ambiguity rather than pick one.
-- SECURITY DEFINER with a pinned search_path so that a role granted EXECUTE (trellara_admin) needs
-- no privileges on the tables themselves; EXECUTE is revoked from PUBLIC below.
CREATE OR REPLACE FUNCTION trellara.quarantine_replay_ready(xid bigint, commit_lsn pg_lsn, flow text)
RETURNS text LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  found_row trellara.quarantine%ROWTYPE;
  matches bigint;
  flows text;
BEGIN
  SELECT count(*), string_agg(q.flow, ', ' ORDER BY q.flow) INTO matches, flows FROM trellara.quarantine q
   WHERE q.xid = quarantine_replay_ready.xid AND q.commit_lsn = quarantine_replay_ready.commit_lsn
     AND (quarantine_replay_ready.flow IS NULL OR q.flow = quarantine_replay_ready.flow);
  IF matches = 0 THEN
    RAISE EXCEPTION 'refused: no quarantined transaction % (commit %)%; nothing was marked',
      quarantine_replay_ready.xid, quarantine_replay_ready.commit_lsn,
      coalesce(' of flow ' || quarantine_replay_ready.flow, '')
      USING HINT = 'SELECT flow, xid, commit_lsn, state FROM trellara.quarantine shows the exact boundaries';
  END IF;
  IF matches > 1 THEN
    RAISE EXCEPTION 'refused: transaction % (commit %) is quarantined in flows %; nothing was marked',
      quarantine_replay_ready.xid, quarantine_replay_ready.commit_lsn, flows
      USING HINT = format('name the flow: SELECT trellara.quarantine_replay_ready(%s, %L, %L)',
                          quarantine_replay_ready.xid, quarantine_replay_ready.commit_lsn, split_part(flows, ', ', 1));
  END IF;
  SELECT * INTO found_row FROM trellara.quarantine q
   WHERE q.xid = quarantine_replay_ready.xid AND q.commit_lsn = quarantine_replay_ready.commit_lsn
     AND (quarantine_replay_ready.flow IS NULL OR q.flow = quarantine_replay_ready.flow)
   FOR UPDATE;
  IF found_row.state = 'replay_ready' THEN
    RETURN format('transaction %s (commit %s) of flow %s is already replay-ready; nothing changed',
                  found_row.xid, found_row.commit_lsn, found_row.flow);
  END IF;
  IF found_row.state <> 'quarantined' THEN
    RAISE EXCEPTION 'refused: transaction % (commit %) of flow % was already resolved; nothing to replay',
      found_row.xid, found_row.commit_lsn, found_row.flow;
  END IF;
  UPDATE trellara.quarantine q SET state = 'replay_ready', replay_ready_at = now()
   WHERE q.flow = found_row.flow AND q.commit_lsn = found_row.commit_lsn;
  RETURN format('transaction %s (commit %s) of flow %s is marked replay-ready; the applier retries it next',
                found_row.xid, found_row.commit_lsn, found_row.flow);
END
$fn$;

-- The form every quarantine message names: the flow is found from the boundary.
CREATE OR REPLACE FUNCTION trellara.quarantine_replay_ready(xid bigint, commit_lsn pg_lsn)
RETURNS text LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT trellara.quarantine_replay_ready(xid, commit_lsn, NULL::text)
$fn$;

-- Every quarantine row (all flows, all states, oldest boundary first): what `trellara quarantine
-- list` prints. Read-only.
CREATE OR REPLACE FUNCTION trellara.quarantine_list()
RETURNS TABLE (flow text, xid bigint, commit_lsn pg_lsn, state text, reason text, sqlstate text,
               attempts integer, detail text, message text, next_step text,
               first_quarantined_at timestamptz, last_failed_at timestamptz,
               replay_ready_at timestamptz, resolved_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT q.flow, q.xid, q.commit_lsn, q.state, q.reason, q.sqlstate, q.attempts, q.detail, q.message,
         q.next_step, q.first_quarantined_at, q.last_failed_at, q.replay_ready_at, q.resolved_at
    FROM trellara.quarantine q
   ORDER BY q.flow, q.commit_lsn
$fn$;

-- One row per flow: the recorded apply state plus the live facts `trellara status` combines with
-- the log. applier_running is true while a session holds the flow's applier advisory lock
-- (pg_try_advisory_lock(hashtextextended('trellara apply <flow>', 0)), taken by `trellara apply`
-- for its whole session): it is read from pg_locks, never by trying the lock, so asking never
-- gets in an applier's way. applied_commit_lsn is the replication origin's progress now (the
-- per-transaction checkpoint), not the value recorded at the last status write. Read-only.
CREATE OR REPLACE FUNCTION trellara.apply_status()
RETURNS TABLE (flow text, recorded_state text, applier_running boolean, applied_commit_lsn pg_lsn,
               consumer_offset bigint, applied_transactions bigint, skipped_duplicates bigint,
               quarantined bigint, replay_ready bigint, last_error text, updated_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT s.flow, s.state,
         EXISTS (SELECT 1 FROM pg_locks l
                  WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
                    AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
                    AND ((l.classid::bigint << 32) | l.objid::bigint)
                        = hashtextextended('trellara apply ' || s.flow, 0)),
         CASE WHEN pg_replication_origin_oid('trellara_' || s.flow) IS NOT NULL
              THEN pg_replication_origin_progress('trellara_' || s.flow, false) END,
         s.consumer_offset, s.applied_transactions, s.skipped_duplicates,
         (SELECT count(*) FROM trellara.quarantine q WHERE q.flow = s.flow AND q.state = 'quarantined'),
         (SELECT count(*) FROM trellara.quarantine q WHERE q.flow = s.flow AND q.state = 'replay_ready'),
         s.last_error, s.updated_at
    FROM trellara.apply_status s
   ORDER BY s.flow
$fn$;

-- Privileges (DESIGN §7): nothing is executable by PUBLIC; the read-only functions are granted to
-- pg_monitor; the mutating one to trellara_admin when that role exists (this file never creates
-- roles: that needs CREATEROLE and is the DBA's decision). Re-running these is a no-op.
REVOKE ALL ON FUNCTION trellara.quarantine_replay_ready(bigint, pg_lsn) FROM PUBLIC;
REVOKE ALL ON FUNCTION trellara.quarantine_replay_ready(bigint, pg_lsn, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION trellara.quarantine_list() FROM PUBLIC;
REVOKE ALL ON FUNCTION trellara.require_one_row(bigint) FROM PUBLIC;  -- the applier's own check
REVOKE ALL ON FUNCTION trellara.require_no_replica_triggers(text[]) FROM PUBLIC;  -- the applier's own guard
REVOKE ALL ON FUNCTION trellara.require_unapplied(text, pg_lsn[], text) FROM PUBLIC;  -- the applier's own check
REVOKE ALL ON FUNCTION trellara.batch_column_types(text, text[], text[]) FROM PUBLIC;  -- the applier's own check
REVOKE ALL ON FUNCTION trellara.relation_tree(oid) FROM PUBLIC;  -- the guards' helper
REVOKE ALL ON FUNCTION trellara.rename_enum_value(regtype, text, text) FROM PUBLIC;  -- the applier's DDL step
REVOKE ALL ON FUNCTION trellara.require_each_row_once(bigint[], bigint) FROM PUBLIC;  -- the applier's own check
REVOKE ALL ON FUNCTION trellara.require_rows(bigint, bigint) FROM PUBLIC;  -- the applier's own check
REVOKE ALL ON FUNCTION trellara.apply_status() FROM PUBLIC;
GRANT USAGE ON SCHEMA trellara TO pg_monitor;
GRANT EXECUTE ON FUNCTION trellara.quarantine_list() TO pg_monitor;
GRANT EXECUTE ON FUNCTION trellara.apply_status() TO pg_monitor;
DO $grant$
BEGIN
  IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'trellara_admin') THEN
    GRANT USAGE ON SCHEMA trellara TO trellara_admin;
    GRANT EXECUTE ON FUNCTION trellara.quarantine_replay_ready(bigint, pg_lsn) TO trellara_admin;
    GRANT EXECUTE ON FUNCTION trellara.quarantine_replay_ready(bigint, pg_lsn, text) TO trellara_admin;
    GRANT EXECUTE ON FUNCTION trellara.quarantine_list() TO trellara_admin;
    GRANT EXECUTE ON FUNCTION trellara.apply_status() TO trellara_admin;
  END IF;
END
$grant$;

-- ---- schema changes (docs/schema-changes.md) ---------------------------------------------------
-- What the flow knows of each source relation (core ddl_apply.h "Drift"): the fingerprint of the
-- definition the applier last accepted for that source oid, written in the target transaction that
-- first applied a change of it (after the target catalog check) or that applied a DDL changing it,
-- and deleted with the transaction that applied its DROP TABLE. A change whose relation carries
-- another fingerprint with no DDL record before it is schema_drift. Never edited by the applier
-- outside an apply transaction; deleting a row makes the next change of that relation a first
-- sight again (the target catalog check decides).
CREATE TABLE IF NOT EXISTS trellara.relation_schemas (
  flow               text        NOT NULL,
  source_oid         oid         NOT NULL,
  schema             text        NOT NULL,
  name               text        NOT NULL,
  fingerprint        bytea       NOT NULL,
  updated_commit_lsn pg_lsn      NOT NULL,
  updated_at         timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (flow, source_oid)
);

-- ---- snapshot, handoff and verify coordination (docs/snapshot.md) --------------------------
-- The initial copy (`trellara snapshot`) and reseeds (`trellara reseed`): one row per run, per
-- table and per key-range chunk. A chunk's rows and its row here (state 'copied' and the source
-- snapshot it was read in) commit in one target transaction. The applier decides, row by row,
-- from these rows whether a streamed change is already in the copy (core snapshot.h).
CREATE TABLE IF NOT EXISTS trellara.snapshot_runs (
  flow        text        NOT NULL,
  run_id      text        NOT NULL,
  kind        text        NOT NULL CHECK (kind IN ('snapshot', 'reseed')),
  state       text        NOT NULL
              CHECK (state IN ('pending', 'copying', 'copied', 'handoff_ready', 'failed_recoverable')),
  last_error  text,
  started_at  timestamptz NOT NULL DEFAULT now(),
  updated_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (flow, run_id)
);

-- One row per (flow, table): the table's current copy. key_column is the leading key column the
-- chunks split on (NULL: the whole table is one chunk). row_filter is a reseed's --where.
CREATE TABLE IF NOT EXISTS trellara.snapshot_tables (
  flow         text        NOT NULL,
  schema_name  text        NOT NULL,
  table_name   text        NOT NULL,
  run_id       text        NOT NULL,
  state        text        NOT NULL
               CHECK (state IN ('pending', 'copying', 'copied', 'handoff_ready', 'failed_recoverable')),
  key_column   text,
  row_filter   text,
  chunks       integer     NOT NULL,
  rows_copied  bigint      NOT NULL DEFAULT 0,
  bytes_copied bigint      NOT NULL DEFAULT 0,
  seconds      double precision NOT NULL DEFAULT 0,
  last_error   text,
  updated_at   timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (flow, schema_name, table_name)
);

-- One row per chunk of a table's current copy: [lo, hi) of key_column (NULL = unbounded). state
-- moves pending -> copied only (the copy in flight holds this row locked FOR UPDATE); snapshot is
-- the source snapshot (pg_snapshot text 'xmin:xmax:xip,...') the chunk was read in.
CREATE TABLE IF NOT EXISTS trellara.snapshot_chunks (
  flow         text        NOT NULL,
  schema_name  text        NOT NULL,
  table_name   text        NOT NULL,
  chunk_no     integer     NOT NULL,
  lo           bigint,
  hi           bigint,
  state        text        NOT NULL CHECK (state IN ('pending', 'copied')),
  snapshot     text,
  rows_copied  bigint      NOT NULL DEFAULT 0,
  bytes_copied bigint      NOT NULL DEFAULT 0,
  copied_at    timestamptz,
  PRIMARY KEY (flow, schema_name, table_name, chunk_no),
  CHECK ((state = 'copied') = (snapshot IS NOT NULL))
);

-- snapshot_lsn: the source's WAL insert position read right after `snapshot` was taken (NULL for a
-- chunk copied by a release that did not record it). A transaction whose commit LSN is past it is
-- not in the copy, and once every chunk of a table has one, a transaction past the highest is
-- applied as if the table had never been copied (docs/snapshot.md "Retirement"). Added only when
-- missing: ALTER TABLE would wait on (and block behind) a chunk copy holding its row lock.
DO $snapshot_lsn$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute WHERE attrelid = 'trellara.snapshot_chunks'::regclass
                   AND attname = 'snapshot_lsn' AND NOT attisdropped) THEN
    ALTER TABLE trellara.snapshot_chunks ADD COLUMN snapshot_lsn pg_lsn;
  END IF;
END
$snapshot_lsn$;

-- Streamed transactions the applier left out because they touched a chunk not yet copied: the
-- copy of that chunk must be read in a snapshot that sees every one of them.
CREATE TABLE IF NOT EXISTS trellara.snapshot_skips (
  flow         text    NOT NULL,
  schema_name  text    NOT NULL,
  table_name   text    NOT NULL,
  chunk_no     integer NOT NULL,
  xid          bigint  NOT NULL,
  commit_lsn   pg_lsn  NOT NULL,
  PRIMARY KEY (flow, schema_name, table_name, chunk_no, xid)
);

-- The applier's view of the snapshot rows and holds: any change to which tables are being copied
-- or which holds are requested bumps version, under the flow's control lock taken exclusively.
-- Every applier transaction checks it (trellara.control_check) holding the same lock shared.
CREATE TABLE IF NOT EXISTS trellara.apply_control (
  flow        text        PRIMARY KEY,
  version     bigint      NOT NULL DEFAULT 0,
  updated_at  timestamptz NOT NULL DEFAULT now()
);

-- A request that the applier stop right before the first transaction that committed after lsn
-- (commit LSN > lsn) until the requester releases its hold lock: verify and filtered reseeds read
-- the target at exactly the point of their source snapshot. state: requested -> reached (the
-- applier has applied everything up to lsn and nothing after) | passed (it was already beyond).
CREATE TABLE IF NOT EXISTS trellara.apply_holds (
  flow            text        NOT NULL,
  hold_id         text        NOT NULL,
  lsn             pg_lsn      NOT NULL,
  state           text        NOT NULL CHECK (state IN ('requested', 'reached', 'passed')),
  applied_lsn     pg_lsn,
  requested_at    timestamptz NOT NULL DEFAULT now(),
  updated_at      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (flow, hold_id)
);

-- Called first in every applier transaction: waits while a registration holds the flow's control
-- lock, then refuses (SQLSTATE TR010) when the registry changed since the applier read it, so no
-- transaction commits under an outdated view of which tables are being copied.
CREATE OR REPLACE FUNCTION trellara.control_check(flow text, expected bigint)
RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE
  current bigint;
BEGIN
  PERFORM pg_catalog.pg_advisory_xact_lock_shared(pg_catalog.hashtextextended('trellara control ' || flow, 0));
  SELECT c.version INTO current FROM trellara.apply_control c WHERE c.flow = control_check.flow;
  IF coalesce(current, 0) <> expected THEN
    RAISE EXCEPTION 'the snapshot registry of flow % changed (version % -> %)', flow, expected, coalesce(current, 0)
      USING ERRCODE = 'TR010';
  END IF;
END
$fn$;
REVOKE ALL ON FUNCTION trellara.control_check(text, bigint) FROM PUBLIC;

-- One row per table being copied or copied (every flow): what `trellara status` shows of the
-- snapshot. chunks_copied / rows_copied come from the chunk rows (committed with the data), so a
-- killed copy shows exactly what survived. skipped_transactions: streamed transactions waiting for
-- their chunk's copy. Read-only.
CREATE OR REPLACE FUNCTION trellara.snapshot_status()
RETURNS TABLE (flow text, run_id text, table_name text, state text, key_column text, row_filter text,
               chunks integer, chunks_copied bigint, rows_copied bigint, bytes_copied bigint,
               seconds double precision, skipped_transactions bigint, last_error text,
               updated_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT t.flow, t.run_id, quote_ident(t.schema_name) || '.' || quote_ident(t.table_name), t.state,
         t.key_column, t.row_filter, t.chunks,
         (SELECT count(*) FROM trellara.snapshot_chunks c
           WHERE c.flow = t.flow AND c.schema_name = t.schema_name AND c.table_name = t.table_name
             AND c.state = 'copied'),
         (SELECT coalesce(sum(c.rows_copied), 0)::bigint FROM trellara.snapshot_chunks c
           WHERE c.flow = t.flow AND c.schema_name = t.schema_name AND c.table_name = t.table_name),
         (SELECT coalesce(sum(c.bytes_copied), 0)::bigint FROM trellara.snapshot_chunks c
           WHERE c.flow = t.flow AND c.schema_name = t.schema_name AND c.table_name = t.table_name),
         t.seconds,
         (SELECT count(DISTINCT s.xid) FROM trellara.snapshot_skips s
           WHERE s.flow = t.flow AND s.schema_name = t.schema_name AND s.table_name = t.table_name),
         t.last_error, t.updated_at
    FROM trellara.snapshot_tables t
   ORDER BY t.flow, t.schema_name, t.table_name
$fn$;
REVOKE ALL ON FUNCTION trellara.snapshot_status() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION trellara.snapshot_status() TO pg_monitor;
DO $grant$
BEGIN
  IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'trellara_admin') THEN
    GRANT EXECUTE ON FUNCTION trellara.snapshot_status() TO trellara_admin;
  END IF;
END
$grant$;

-- Partitioned scale mode (docs/partitioned.md). A partition applier commits its partition's
-- chunks of a source transaction here together with its checkpoint, in one target transaction;
-- the publisher (trellara apply) moves a transaction into the user tables — and deletes its staged
-- chunks — in one target transaction, only once every partition its manifest lists holds
-- checkpoint evidence for it. Readers of the user tables never see part of a source transaction.
CREATE TABLE IF NOT EXISTS trellara.partition_stage (
  flow        text   NOT NULL,
  commit_lsn  pg_lsn NOT NULL,
  seq         int    NOT NULL,  -- the chunk's seq in its transaction
  partition   int    NOT NULL,
  xid         bigint NOT NULL,
  record      bytea  NOT NULL,  -- the chunk's log record, byte for byte (checksummed)
  staged_at   timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (flow, commit_lsn, seq)
);
COMMENT ON TABLE trellara.partition_stage IS
  'Trellara partitioned mode: chunks partition appliers committed, not yet published into the user tables';
-- Checkpoint evidence: the partition committed its part of every partitioned transaction of the
-- flow at or below commit_lsn; it resumes reading the log at log_offset. A blocker names the
-- transaction it refused (before anything of it was staged) and why.
CREATE TABLE IF NOT EXISTS trellara.partition_checkpoints (
  flow                text   NOT NULL,
  partition           int    NOT NULL,
  commit_lsn          pg_lsn NOT NULL DEFAULT '0/0',
  log_offset          bigint NOT NULL DEFAULT 0,
  map_version         int,
  transactions        bigint NOT NULL DEFAULT 0,
  chunks              bigint NOT NULL DEFAULT 0,
  duplicate_chunks    bigint NOT NULL DEFAULT 0,
  last_commit_time    timestamptz,
  blocker             text,
  blocked_commit_lsn  pg_lsn,
  blocked_at          timestamptz,
  applier_pid         int,
  updated_at          timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (flow, partition)
);
COMMENT ON TABLE trellara.partition_checkpoints IS
  'Trellara partitioned mode: each partition applier''s checkpoint evidence and blocker';
