// relay/worker_retention.cpp — log retention in the relay worker (docs/log.md): deletes the
// segments every live consumer is past and, over trellara.log_retention_max_size, marks the
// consumers it overtakes lost. Runs only with everything appended durable (AcknowledgeDurable); it
// must never run on the append path, between an append and its fdatasync, or stop capture on a
// failure (it is logged and retried).
extern "C" {
#include "postgres.h"
}

#include <string>

#include "pg/guard.h"
#include "relay/relay.h"
#include "relay/worker_internal.h"
#include "trellara/capture/relay_progress.h"
#include "trellara/log/retention.h"

namespace trellara::relay::worker {

namespace {

// Log retention (docs/log.md): at most once per interval, when everything appended
// is durable — never on the append path, never between an append and its fdatasync. Deletes
// segments every live consumer is past; with trellara.log_retention_max_size set, marks the
// consumers it overtakes lost first. A failure is logged and retried; capture goes on.
constexpr uint64_t kRetentionIntervalUs = 1'000'000;
constexpr uint64_t kRetentionWarnEveryUs = 60'000'000;
uint64_t last_retention_us = 0;
uint64_t last_retention_warning_us = 0;
char last_retention_error[256];  // plain buffer: no static constructor or destructor in the .so

}  // namespace

bool RetentionDue() { return NowUs() - last_retention_us >= kRetentionIntervalUs; }

void ApplyRetentionWhenDue() {
  const uint64_t now = NowUs();
  if (now - last_retention_us < kRetentionIntervalUs) return;
  last_retention_us = now;
  auto report = log::ApplyRetention(*g_relay->device, log_directory, LogRetentionMaxBytes(), CompletesTransaction);
  std::string message;
  int level = LOG;
  if (report.ok()) last_retention_error[0] = '\0';
  if (!report.ok()) {
    // Retried every second; warned about when the reason changes, else once a minute.
    const std::string& reason = report.error().message;
    if (reason.compare(0, sizeof last_retention_error - 1, last_retention_error) == 0 &&
        now - last_retention_warning_us < kRetentionWarnEveryUs)
      return;
    strlcpy(last_retention_error, reason.c_str(), sizeof last_retention_error);
    last_retention_warning_us = now;
    level = WARNING;
    message = "log retention failed: " + report.error().message + "; nothing is deleted until this is fixed";
  } else if (!report->marked_lost.empty()) {
    level = WARNING;
    for (const auto& name : report->marked_lost) message += (message.empty() ? "" : ", ") + name;
    message = "log reached trellara.log_retention_max_size: consumer(s) " + message +
              " marked lost (they must be reseeded); deleted " + std::to_string(report->segments_deleted) +
              " segment(s), the log now starts at offset " + std::to_string(report->retained_from_offset);
  } else if (report->segments_deleted > 0) {
    message = "deleted " + std::to_string(report->segments_deleted) + " log segment(s) (" +
              std::to_string(report->bytes_deleted) + " bytes) no live consumer needs; the log starts at offset " +
              std::to_string(report->retained_from_offset);
  }
  if (message.empty()) return;
  pg::CallPostgres([&] {
    ereport(level, (errmsg("trellara relay of flow \"%s\": %s", flow_name, message.c_str())));
  });
}

}  // namespace trellara::relay::worker
