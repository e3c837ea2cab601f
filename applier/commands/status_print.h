// status_print.h — the views of `trellara status` (status_print.cpp).
#pragma once

#include <string>
#include <vector>

#include "commands/status_read.h"
#include "kit/options.h"
#include "trellara/report/status_views.h"

namespace trellara::cli::status {

// --view dashboard (the default): state, lag, quarantine, snapshot, the next action.
void Print(const FlowConfig& config, const FlowStatus& s, OutputFormat format);
// --view diagnostics: the log, the lock holder, the origin, the dedup rows, the source's relay.
void PrintDiagnostics(const FlowConfig& config, const FlowStatus& s, const Extended& e, OutputFormat format);
// --view alerts: core's DecideAlerts over the facts, and their rendering.
std::vector<Alert> Alerts(const FlowConfig& config, const std::string& config_path, const FlowStatus& s,
                          const Extended& e, const AlertThresholds& thresholds);
void PrintAlerts(const FlowConfig& config, const std::vector<Alert>& alerts, OutputFormat format);
// --view report: the flow's hand-over summary.
void PrintReport(const FlowConfig& config, const std::string& config_path, const FlowStatus& s, const Extended& e,
                 OutputFormat format);

}  // namespace trellara::cli::status
