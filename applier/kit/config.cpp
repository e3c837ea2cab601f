// config.cpp — strict loading of the flow configuration file (see config.h). It only reads and
// validates the file; it never connects, never creates directories, never guesses a value.
#include "kit/config.h"
#include "kit/errors.h"

#include "trellara/base/duration.h"

#include <fstream>
#include <map>
#include <initializer_list>
#include <optional>
#include <string_view>
#include <utility>
#include <toml++/toml.h>

namespace trellara::cli {
namespace {

struct KeySpec {
  bool required;
  const char* accepts;  // how the accepted values are described in messages
};

// Every table and key the file may hold. Anything else is an error.
const std::map<std::string, std::map<std::string, KeySpec>>& Schema() {
  static const std::map<std::string, std::map<std::string, KeySpec>> kSchema{
      {"flow",
       {{"name", {true, "a flow name as created by trellara.create_flow: 1..54 characters of [a-z0-9_], not starting with a digit"}},
        {"log_directory", {true, "the absolute path of the flow's log directory (trellara.flows.log_directory)"}}}},
      {"source", {{"conninfo", {false, "a libpq connection string for the source database"}}}},
      {"target", {{"conninfo", {true, "a libpq connection string for the target database"}}}},
      {"apply",
       {{"session_replication_role", {false, "\"replica\" (default) or \"origin\""}},
        {"synchronous_commit",
         {false, "\"off\" (default: the consumer offset then follows the target's flushed origin progress), "
                 "\"local\", \"remote_write\", \"on\" or \"remote_apply\""}},
        {"ddl",
         {false, "\"apply\" (default: supported DDL is applied to the target in the source transaction's order) or "
                 "\"halt\" (every transaction holding DDL is quarantined as ddl_policy_halt)"}},
        {"ddl_drop_table",
         {false, "\"keep\" (default: DROP TABLE leaves the target's table and rows) or \"apply\" (DROP TABLE "
                 "drops the target's table too, irreversibly)"}},
        {"group_transactions",
         {false, "\"on\" (default: a batch of whole source transactions shares one target transaction, each "
                 "with its own dedup row) or \"off\" (one target transaction per source transaction)"}},
        {"early_apply",
         {false, "\"on\" (default: a chunked transaction is staged on the target from its first chunk and "
                 "committed at its commit marker if every chunk staged is one the barrier verified) or \"off\" "
                 "(applied after its commit marker only)"}},
        {"early_apply_idle",
         {false, "a duration \"<N>ms\", \"<N>s\", \"<N>m\" (or \"<N>min\") or \"<N>h\" from 100ms to 60min (default \"5s\"): "
                 "how long an "
                 "early attempt waits for the relay's next record before it rolls back"}},
        {"superseded_updates",
         {false, "\"leave_out\" (default: in a grouped batch an UPDATE that a later UPDATE of the same row in the "
                 "group overwrites is not sent) or \"send\" (every UPDATE is sent)"}},
        {"merge_statements",
         {false, "\"on\" (default: in a grouped batch a table's consecutive INSERTs, and its consecutive UPDATEs of one "
                 "shape by key, go as one statement each) or \"off\" (one statement per change)"}}}},
      {"transport",
       {{"kind", {false, "\"local\" (default: the applier reads the log directory on this host) or \"nats\" (the "
                        "log travels through a NATS JetStream stream: trellara forward publishes it)"}},
        {"servers", {false, "the broker's nodes, comma-separated URLs \"nats://HOST:PORT,...\" (kind = \"nats\")"}},
        {"stream", {false, "the JetStream stream of the flow: 1..64 characters of [A-Za-z0-9_-] (kind = \"nats\")"}},
        {"credentials", {false, "the path of a NATS .creds file (optional; kind = \"nats\")"}},
        {"applier",
         {false, "this remote applier's name, reported to the forwarder with its durable position: 1..50 "
                 "characters of [A-Za-z0-9_-] (optional, default \"remote\"; kind = \"nats\")"}},
        {"remote_appliers",
         {false, "the remote appliers the forwarder keeps the source's log for until each has reported past it, "
                 "comma-separated names (optional, default \"remote\"; kind = \"nats\")"}}}},
      {"metrics",
       {{"listen",
         {false, "\"HOST:PORT\" where trellara apply serves GET /metrics (Prometheus text format): HOST an IPv4 "
                 "literal, localhost or a bracketed IPv6 literal ([::1]), PORT 1..65535; e.g. \"127.0.0.1:9187\""}}}},
  };
  return kSchema;
}

Error SettingError(const std::string& path, const std::string& setting, const std::string& problem) {
  const auto dot = setting.find('.');
  const auto& spec = Schema().at(setting.substr(0, dot)).at(setting.substr(dot + 1));
  return MakeError("configuration " + path + ": setting " + setting + " " + problem + "; it accepts " +
                   spec.accepts);
}

// An enumerated setting: `value`, when present, must name one of `choices`, which is stored in
// `out`; absent leaves `out` at its default.
template <typename T>
Status Choose(const std::optional<std::string>& value, const std::string& path, const std::string& setting,
              std::initializer_list<std::pair<std::string_view, T>> choices, T& out) {
  if (!value) return Status::Ok();
  for (const auto& [name, choice] : choices) {
    if (*value != name) continue;
    out = choice;
    return Status::Ok();
  }
  return SettingError(path, setting, "is \"" + *value + "\"");
}

// The items of a comma-separated setting, spaces around each trimmed; an empty item stays (and is
// refused by the caller's check), so "a,,b" is never read as "a,b".
std::vector<std::string> CommaList(const std::string& text) {
  std::vector<std::string> items;
  size_t from = 0;
  for (;;) {
    size_t comma = text.find(',', from);
    if (comma == std::string::npos) comma = text.size();
    std::string item = text.substr(from, comma - from);
    const size_t first = item.find_first_not_of(' ');
    item = first == std::string::npos ? "" : item.substr(first, item.find_last_not_of(' ') - first + 1);
    items.push_back(std::move(item));
    if (comma == text.size()) return items;
    from = comma + 1;
  }
}

// [transport]: every key but kind belongs to kind = "nats" and is then required (credentials
// optional, but a named file must be readable).
template <typename Get>
Status LoadTransport(const Get& get, const std::string& path, TransportConfig& transport) {
  TRELLARA_TRY(Choose(get("transport", "kind"), path, "transport.kind",
                      {{"local", TransportKind::Local}, {"nats", TransportKind::Nats}}, transport.kind));
  if (transport.kind == TransportKind::Local) {
    for (const char* key : {"servers", "stream", "credentials", "applier", "remote_appliers"})
      if (get("transport", key))
        return SettingError(path, std::string("transport.") + key, "is set but transport.kind is \"local\"");
    return Status::Ok();
  }
  const auto servers = get("transport", "servers");
  if (!servers || servers->empty()) return SettingError(path, "transport.servers", "is missing");
  for (const std::string& url : CommaList(*servers)) {
    if (url.rfind("nats://", 0) != 0 || url.size() <= 7)
      return SettingError(path, "transport.servers", "names \"" + url + "\" (not a nats://HOST:PORT URL)");
    transport.servers.push_back(url);
  }
  const auto stream = get("transport", "stream");
  if (!stream) return SettingError(path, "transport.stream", "is missing");
  if (stream->empty() || stream->size() > 64 ||
      stream->find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-") != std::string::npos)
    return SettingError(path, "transport.stream", "is \"" + *stream + "\"");
  transport.stream = *stream;
  if (auto credentials = get("transport", "credentials")) {
    std::ifstream file(*credentials);
    if (!file)
      return SettingError(path, "transport.credentials", "names " + *credentials + ", which cannot be read");
    transport.credentials = *credentials;
  }
  auto name_ok = [](const std::string& name) {
    return !name.empty() && name.size() <= 50 &&
           name.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-") == std::string::npos;
  };
  if (auto applier = get("transport", "applier")) {
    if (!name_ok(*applier)) return SettingError(path, "transport.applier", "is \"" + *applier + "\"");
    transport.applier = *applier;
  }
  if (auto remote = get("transport", "remote_appliers")) {
    transport.remote_appliers.clear();
    for (const std::string& name : CommaList(*remote)) {
      if (!name_ok(name)) return SettingError(path, "transport.remote_appliers", "names \"" + name + "\"");
      transport.remote_appliers.push_back(name);
    }
  }
  return Status::Ok();
}
}  // namespace

const char* SettingValue(SessionReplicationRole role) {
  switch (role) {
    case SessionReplicationRole::Replica: return "replica";
    case SessionReplicationRole::Origin: return "origin";
  }
  return "replica";  // unreachable: every enumerator is handled above (-Wswitch)
}

const char* SettingValue(SynchronousCommit level) {
  switch (level) {
    case SynchronousCommit::Off: return "off";
    case SynchronousCommit::Local: return "local";
    case SynchronousCommit::RemoteWrite: return "remote_write";
    case SynchronousCommit::On: return "on";
    case SynchronousCommit::RemoteApply: return "remote_apply";
  }
  return "on";  // unreachable: every enumerator is handled above (-Wswitch)
}

Result<FlowConfig> LoadFlowConfig(const std::string& path) {
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    const auto& where = e.source().begin;
    return MakeError("configuration " + path + " is not valid TOML at line " + std::to_string(where.line) +
                     ", column " + std::to_string(where.column) + ": " + std::string(e.description()) +
                     "; fix the file (it needs [flow] name and log_directory, and [target] conninfo)");
  }

  // Unknown tables and keys first: a misspelt key must not turn into a silently used default.
  for (const auto& [table_key, node] : root) {
    const std::string table_name(table_key.str());
    auto spec = Schema().find(table_name);
    if (spec == Schema().end())
      return MakeError("configuration " + path + ": unknown table [" + table_name +
                       "]; the accepted tables are [flow], [source], [target], [apply], [transport] and [metrics]");
    const toml::table* table = node.as_table();
    if (table == nullptr)
      return MakeError("configuration " + path + ": " + table_name + " must be a table ([" + table_name + "])");
    for (const auto& [key, value] : *table) {
      const std::string key_name(key.str());
      if (!spec->second.contains(key_name)) {
        std::string accepted;
        for (const auto& [k, _] : spec->second) accepted += (accepted.empty() ? "" : ", ") + table_name + "." + k;
        return MakeError("configuration " + path + ": unknown setting " + table_name + "." + key_name +
                         "; the accepted settings of [" + table_name + "] are " + accepted);
      }
      if (!value.is_string())
        return SettingError(path, table_name + "." + key_name, "must be a string");
    }
  }

  auto get = [&](const std::string& table, const std::string& key) -> std::optional<std::string> {
    if (auto v = root[table][key].value<std::string>()) return *v;
    return std::nullopt;
  };

  FlowConfig config;
  config.path = path;
  for (const auto& [table_name, keys] : Schema()) {
    for (const auto& [key_name, spec] : keys) {
      if (!spec.required || get(table_name, key_name)) continue;
      return SettingError(path, table_name + "." + key_name, "is missing");
    }
  }

  config.flow_name = *get("flow", "name");
  if (config.flow_name.empty() || config.flow_name.size() > 54 ||
      (config.flow_name.front() >= '0' && config.flow_name.front() <= '9'))
    return SettingError(path, "flow.name", "is \"" + config.flow_name + "\"");
  for (char c : config.flow_name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
      return SettingError(path, "flow.name", "is \"" + config.flow_name + "\"");
  }

  config.log_directory = *get("flow", "log_directory");
  if (config.log_directory.empty() || config.log_directory.front() != '/')
    return SettingError(path, "flow.log_directory", "is \"" + config.log_directory + "\" (not an absolute path)");

  config.target_conninfo = *get("target", "conninfo");
  if (config.target_conninfo.empty()) return SettingError(path, "target.conninfo", "is empty");
  config.source_conninfo = get("source", "conninfo").value_or("");

  using Role = SessionReplicationRole;
  TRELLARA_TRY(Choose(get("apply", "session_replication_role"), path, "apply.session_replication_role",
                      {{"replica", Role::Replica}, {"origin", Role::Origin}}, config.session_replication_role));
  using Sync = SynchronousCommit;
  TRELLARA_TRY(Choose(get("apply", "synchronous_commit"), path, "apply.synchronous_commit",
                      {{"off", Sync::Off}, {"local", Sync::Local}, {"remote_write", Sync::RemoteWrite},
                       {"on", Sync::On}, {"remote_apply", Sync::RemoteApply}},
                      config.synchronous_commit));
  TRELLARA_TRY(Choose(get("apply", "ddl"), path, "apply.ddl", {{"apply", DdlPolicy::Apply}, {"halt", DdlPolicy::Halt}},
                      config.ddl));
  TRELLARA_TRY(Choose(get("apply", "ddl_drop_table"), path, "apply.ddl_drop_table",
                      {{"keep", DropTablePolicy::Keep}, {"apply", DropTablePolicy::Apply}}, config.ddl_drop_table));
  TRELLARA_TRY(Choose(get("apply", "group_transactions"), path, "apply.group_transactions",
                      {{"on", true}, {"off", false}}, config.group_transactions));
  TRELLARA_TRY(Choose(get("apply", "superseded_updates"), path, "apply.superseded_updates",
                      {{"leave_out", true}, {"send", false}}, config.leave_out_superseded_updates));
  TRELLARA_TRY(Choose(get("apply", "merge_statements"), path, "apply.merge_statements",
                      {{"on", true}, {"off", false}}, config.merge_statements));
  TRELLARA_TRY(Choose(get("apply", "early_apply"), path, "apply.early_apply", {{"on", true}, {"off", false}},
                      config.early_apply));
  if (auto idle = get("apply", "early_apply_idle")) {
    auto ms = ParseDurationMs(*idle);  // core duration.h
    if (!ms) return SettingError(path, "apply.early_apply_idle", "is \"" + *idle + "\": " + ms.error().message);
    if (*ms < 100 || *ms > 3600000)
      return SettingError(path, "apply.early_apply_idle", "is \"" + *idle + "\": out of range");
    config.early_apply_idle = std::chrono::milliseconds(*ms);
  }
  if (auto listen = get("metrics", "listen")) {
    auto address = metrics::ParseListenAddress(*listen);
    if (!address) return SettingError(path, "metrics.listen", address.error().message);
    config.metrics_listen = *address;
  }
  TRELLARA_TRY(LoadTransport(get, path, config.transport));
  return config;
}

FlowConfig LoadConfigOrFail(const std::string& path) {
  auto config = LoadFlowConfig(path);
  if (!config) throw CommandFailed(config.error().message, kExitConfig);
  return std::move(config.value());
}

}  // namespace trellara::cli
