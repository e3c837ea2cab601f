// session.cpp — see session.h.
#include "pg/session.h"

#include <optional>

namespace trellara::cli {

PgResult MustSucceed(PgConnection& conn, PgResult result, const std::string& what) {
  if (!result.ok()) throw CommandFailed(what + " failed on " + conn.Describe() + ": " + result.Describe());
  return result;
}

std::unique_ptr<PgConnection> ConnectPinned(const FlowConfig& config, const std::string& conninfo,
                                            const std::string& role, const std::string& application_name) {
  auto conn = PgConnection::Connect(conninfo, application_name);
  if (!conn)
    throw CommandFailed("cannot connect to the " + role + " of flow " + config.flow_name + " (" + role +
                        ".conninfo in " + config.path + "): " + conn.error().message);
  MustSucceed(**conn,
              (*conn)->Exec(kPinnedSessionSettingsSql),
              "pinning the session settings on the " + role);
  return std::move(conn.value());
}

void RequireTargetState(PgConnection& target, const FlowConfig& config) {
  auto r = MustSucceed(target,
                       target.Exec("SELECT to_regprocedure('trellara.apply_status()') IS NOT NULL AND "
                                   "to_regprocedure('trellara.quarantine_list()') IS NOT NULL"),
                       "looking up the trellara state functions");
  if (r.Value(0, 0) != std::optional<std::string>("t"))
    throw CommandFailed("the target " + target.Describe() + " has no trellara.apply_status() / "
                        "trellara.quarantine_list() (trellara apply never ran there with this version); run "
                        "trellara apply --config " + config.path + " once: it installs them");
}

}  // namespace trellara::cli
