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

-- Marks exactly one quarantined boundary replay-ready; refuses (raises) for anything else, so a
-- mistyped xid or LSN never releases another transaction. Same rules as core's DecideReplayReady.
CREATE OR REPLACE FUNCTION trellara.quarantine_replay_ready(xid bigint, commit_lsn pg_lsn)
RETURNS text LANGUAGE plpgsql AS $fn$
DECLARE
  found_row trellara.quarantine%ROWTYPE;
BEGIN
  SELECT * INTO found_row FROM trellara.quarantine q
   WHERE q.xid = quarantine_replay_ready.xid AND q.commit_lsn = quarantine_replay_ready.commit_lsn
   FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'refused: no quarantined transaction % (commit %); nothing was marked',
      quarantine_replay_ready.xid, quarantine_replay_ready.commit_lsn
      USING HINT = 'SELECT flow, xid, commit_lsn, state FROM trellara.quarantine shows the exact boundaries';
  END IF;
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
