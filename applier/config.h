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
//
// Loading is strict: an unknown table or key, a missing required setting, a wrong type or a value
// outside the accepted set is an error naming the setting and what it accepts. Nothing is
// silently defaulted except the documented defaults above. This file never connects anywhere.
#pragma once

#include <string>

#include "trellara/result.h"

namespace trellara::cli {

struct FlowConfig {
  std::string path;            // the file it was loaded from, for messages
  std::string flow_name;       // [flow] name
  std::string log_directory;   // [flow] log_directory
  std::string source_conninfo; // [source] conninfo (verify/check; not used by apply)
  std::string target_conninfo; // [target] conninfo
  std::string session_replication_role = "replica";  // [apply] session_replication_role
  std::string synchronous_commit = "off";            // [apply] synchronous_commit
};

Result<FlowConfig> LoadFlowConfig(const std::string& path);

}  // namespace trellara::cli
