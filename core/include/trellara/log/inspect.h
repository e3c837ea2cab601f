// log/inspect.h — the facts an operator asks of a log directory, as one JSON report.
//
// Shared by `trellara log inspect` and SQL `trellara.log_inspect(flow)` so both say the same thing:
// segments, records, first and last valid offset, torn-tail bytes, index status, consumers,
// corruption. Inspection never truncates or rewrites a log; with repair_index it only rebuilds
// index files, and only when no writer holds the directory lock.
#pragma once

#include <string>

#include "trellara/log/device.h"
#include "trellara/base/result.h"

namespace trellara::log {

struct InspectOptions {
  bool repair_index = false;
};

struct InspectReport {
  std::string json;  // the report object, compact
  bool corrupt = false;      // mid-log corruption found: the log must not be read past it
  std::string corruption;    // its description when corrupt
};

Result<InspectReport> InspectLog(LogDevice& device, const std::string& dir, const InspectOptions& options);

}  // namespace trellara::log
