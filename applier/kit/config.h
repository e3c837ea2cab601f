// config.h — the flow configuration file (TOML) of the `trellara` command.
//
//   [flow]   name, log_directory
//   [source] conninfo
//   [target] conninfo
//   [apply]  session_replication_role = "replica" (default) | "origin"
//            synchronous_commit = "off" (default) | "local" | "remote_write" | "on" | "remote_apply"
//              the apply session's synchronous_commit. With "off" (native logical replication's
//              default for its apply worker) a COMMIT returns before the target flushed it, so the
//              consumer offset only passes what pg_replication_origin_progress(origin, true)
//              reports as flushed; a target crash then loses nothing the log no longer holds.
//            ddl = "apply" (default) | "halt"
//              what the applier does with a captured DDL change (docs/schema-changes.md): "apply"
//              carries the supported changes to the target inside the source transaction's own
//              target transaction; "halt" quarantines every transaction holding DDL
//              (ddl_policy_halt) so a person applies it. A halted transaction the operator marks
//              replay-ready is then planned as under "apply": a DDL already applied by hand is a
//              no-op, the rest is carried out.
//            group_transactions = "on" (default) | "off"
//              "on": the whole source transactions of one batch (up to 256, 1 024 statements) are
//              applied in one target transaction, each with its own dedup row, the origin progress
//              set to the last; a failure rolls the group back and its transactions are applied
//              again one target transaction each, which finds and quarantines exactly the failing
//              one (docs/apply.md "Grouped batches"). "off": one target transaction per source
//              transaction.
//            merge_statements = "on" (default) | "off"
//              in a grouped batch, a table's consecutive INSERTs (and its consecutive UPDATEs by key
//              of one shape, where the target allows: trellara.batch_column_types) are sent as one
//              statement, where the run ends, so each table's writes keep their order; only with
//              session_replication_role = "replica", guarded like superseded_updates (docs/apply.md
//              "Merged statements in a group").
//            superseded_updates = "leave_out" (default) | "send"
//              in a grouped batch, an UPDATE of a row that a later UPDATE of the same group
//              overwrites entirely (same key, same columns, nothing else written to that table in
//              between) is left out; the group still commits as a whole. Never for a table whose
//              target fires triggers or rules for replicated UPDATEs, nor with
//              session_replication_role = "origin" (docs/apply.md "Superseded updates in a group").
//              "send": every UPDATE is sent.
//            ddl_drop_table = "keep" (default) | "apply"
//              DROP TABLE of a published table: "keep" leaves the target's table and its rows (the
//              flow stops following it); "apply" drops it on the target too. Dropping target data
//              cannot be undone, so the DBA opts in.
//            early_apply = "on" (default) | "off"
//              "on": a chunked (large) transaction's target transaction opens at its first chunk
//              and stages each chunk as the relay makes it durable; it commits at the commit marker
//              only if the chunks staged are exactly those the barrier verified, else it is rolled
//              back and applied at its marker as with "off" (docs/apply.md "Early apply").
//            early_apply_idle = "5s" (default): "<N>ms", "<N>s", "<N>m" (or "<N>min"), "<N>h" (core
//              duration.h), 100 ms .. 1 h
//              how long an early attempt waits without a new record before it rolls back (its row
//              locks released) and the transaction waits for its commit marker instead.
//   [metrics] listen = "127.0.0.1:9187" (optional; no metrics endpoint without it)
//              where `trellara apply` serves GET /metrics in the Prometheus text format
//              (docs/apply.md "Metrics"): HOST:PORT, HOST an IPv4 literal, localhost or [IPv6].
//
// Loading is strict: an unknown table or key, a missing required setting, a wrong type or a value
// outside the accepted set is an error naming the setting and what it accepts. Nothing is
// silently defaulted except the documented defaults above. This file never connects anywhere.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "trellara/apply/ddl_apply.h"
#include "trellara/report/metrics.h"
#include "trellara/base/result.h"

namespace trellara::cli {

// [apply] session_replication_role: "replica" skips the target's ordinary triggers and FK checks.
enum class SessionReplicationRole { Replica, Origin };
// [apply] synchronous_commit of the apply session.
enum class SynchronousCommit { Off, Local, RemoteWrite, On, RemoteApply };
// The setting's value as PostgreSQL spells it (for SET and for messages).
const char* SettingValue(SessionReplicationRole role);
const char* SettingValue(SynchronousCommit level);

// [transport]: how the flow's records reach its appliers. Local (default): the applier reads the
// log directory on this host. Nats: `trellara forward` publishes the log to a JetStream stream
// (docs/broker.md).
enum class TransportKind { Local, Nats };
struct TransportConfig {
  TransportKind kind = TransportKind::Local;
  std::vector<std::string> servers;  // [transport] servers, "nats://host:port,..." (kind = "nats")
  std::string stream;                // [transport] stream
  std::string credentials;           // [transport] credentials: a .creds file, or empty
  std::string applier = "remote";    // [transport] applier: this remote applier's name
  std::vector<std::string> remote_appliers{"remote"};  // [transport] remote_appliers (the forwarder)
};

struct FlowConfig {
  std::string path;            // the file it was loaded from, for messages
  std::string flow_name;       // [flow] name
  std::string log_directory;   // [flow] log_directory
  std::string source_conninfo; // [source] conninfo (verify/check; not used by apply)
  std::string target_conninfo; // [target] conninfo
  SessionReplicationRole session_replication_role = SessionReplicationRole::Replica;
  SynchronousCommit synchronous_commit = SynchronousCommit::Off;
  bool group_transactions = true;                    // [apply] group_transactions
  bool leave_out_superseded_updates = true;          // [apply] superseded_updates
  bool merge_statements = true;                      // [apply] merge_statements
  DdlPolicy ddl = DdlPolicy::Apply;                  // [apply] ddl
  DropTablePolicy ddl_drop_table = DropTablePolicy::Keep;  // [apply] ddl_drop_table
  bool early_apply = true;                                 // [apply] early_apply
  std::chrono::milliseconds early_apply_idle{5000};       // [apply] early_apply_idle
  std::optional<metrics::ListenAddress> metrics_listen;    // [metrics] listen
  TransportConfig transport;                               // [transport]
};

Result<FlowConfig> LoadFlowConfig(const std::string& path);

// Loads the configuration or throws CommandFailed (kExitConfig) naming the setting.
FlowConfig LoadConfigOrFail(const std::string& path);

}  // namespace trellara::cli
