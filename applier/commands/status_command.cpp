// status_command.cpp — `trellara status --config F [--format json] [--view V]`: where the flow's
// applier is (running | caught_up | blocked | stopped), how far behind the log it is, what is
// quarantined, and the safe next action in words (DESIGN §7). What it reads is status_read.h, how it
// shows it status_print.h; the state and the next action are core's DecideApplyStatus
// (trellara/report/apply_status.h), the alerts core's DecideAlerts (trellara/report/status_views.h).
#include <CLI/CLI.hpp>

#include <iostream>
#include <map>
#include <memory>
#include <string>

#include "commands/commands.h"
#include "commands/status_print.h"
#include "commands/status_read.h"

namespace trellara::cli {
// Named, not anonymous: the command files compile as unity batches (CMakeLists.txt).
namespace status_command {
namespace {
enum class StatusView { Dashboard, Diagnostics, Alerts, Report };
}  // namespace
}  // namespace status_command

using namespace status;

void RegisterStatus(CLI::App& app) {
  using namespace status_command;
  auto* cmd = app.add_subcommand("status", "flow state, lag, quarantine and the safe next action (--config F); "
                                           "--view dashboard|diagnostics|alerts|report (docs/status.md)");
  auto config_path = std::make_shared<std::string>();
  auto format = std::make_shared<OutputFormat>(OutputFormat::Text);
  auto view = std::make_shared<StatusView>(StatusView::Dashboard);
  auto thresholds = std::make_shared<AlertThresholds>();
  AddConfigOption(cmd, *config_path);
  AddFormatOption(cmd, *format);
  cmd->add_option("--view", *view,
                  "dashboard (default: state, lag, quarantine, next action), diagnostics (log, lock holder, origin, "
                  "dedup rows, source relay), alerts (exit 0 none firing, 3 a critical one fires, 4 only warnings), "
                  "report (the flow's hand-over summary)")
      ->transform(CLI::CheckedTransformer(std::map<std::string, StatusView>{{"dashboard", StatusView::Dashboard},
                                                                            {"diagnostics", StatusView::Diagnostics},
                                                                            {"alerts", StatusView::Alerts},
                                                                            {"report", StatusView::Report}}));
  cmd->add_option("--alert-lag-records", thresholds->lag_records,
                  "alerts: lag_records fires above this many records past the consumer offset (0 disables)")
      ->default_val(thresholds->lag_records);
  cmd->add_option("--alert-lag-bytes", thresholds->lag_bytes,
                  "alerts: lag_bytes fires above this many log bytes past the consumer offset (0 disables)")
      ->default_val(thresholds->lag_bytes);
  cmd->add_option("--alert-log-retention-bytes", thresholds->log_retention_bytes,
                  "alerts: log_retention_bytes fires above this many bytes of log segments (0 disables)")
      ->default_val(thresholds->log_retention_bytes);
  cmd->callback([config_path, format, view, thresholds] {
    const FlowConfig config = LoadConfigOrFail(*config_path);
    if (*view == StatusView::Dashboard) {
      Print(config, ReadStatus(config, *config_path), *format);
      return;
    }
    std::unique_ptr<PgConnection> target;
    const FlowStatus s = ReadStatus(config, *config_path, &target);
    const Extended e = ReadExtended(config, target.get());
    if (*view == StatusView::Diagnostics) {
      PrintDiagnostics(config, s, e, *format);
    } else if (*view == StatusView::Report) {
      PrintReport(config, *config_path, s, e, *format);
    } else {
      const std::vector<Alert> alerts = Alerts(config, *config_path, s, e, *thresholds);
      PrintAlerts(config, alerts, *format);
      std::cout.flush();
      const int code = AlertsExitCode(alerts);
      if (code != kAlertsExitNone) {
        std::string firing;
        for (const Alert& a : alerts)
          if (a.firing) firing += (firing.empty() ? "" : ", ") + a.name + " (" + a.severity + ")";
        throw CommandFailed("flow " + config.flow_name + ": alert(s) firing: " + firing +
                                "; each one's next action is printed above",
                            code);
      }
    }
  });
}

}  // namespace trellara::cli
