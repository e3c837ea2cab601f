// apply_progress.cpp — the progress lines of `trellara apply` (apply_progress.h).
#include "trellara/base/cadence.h"
#include "engine/apply_progress.h"

#include <cstdio>

#include <unistd.h>

namespace trellara::cli::apply {
namespace {
constexpr auto kProgressInterval = cadence::kApplyProgressLine;
constexpr auto kTerminalRedrawInterval = cadence::kTerminalRedraw;
}  // namespace

ApplyProgress::ApplyProgress(std::string flow_name)
    : flow_name_(std::move(flow_name)), tty_(::isatty(STDOUT_FILENO) == 1) {}

void ApplyProgress::Start() {
  started_ = Clock::now();
  // On a terminal the first line is drawn at once, so even a short run shows where it stands.
  last_progress_ = tty_ ? started_ - kTerminalRedrawInterval : started_;
}

void ApplyProgress::Print(const char* state, const Counters& counters, const ProgressFigures& figures) {
  if (progress_line_open_) {
    std::printf("\n");
    progress_line_open_ = false;
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - started_).count();
  std::printf("apply flow=%s state=%s applied=%llu skipped_duplicates=%llu not_applied_changes=%llu "
              "statements=%llu batches=%llu start_offset=%llu consumer_offset=%llu next_log_offset=%llu seconds=%.1f "
              "tx_per_s=%.0f snapshot_in_copy=%llu snapshot_skips=%llu ddl_applied=%llu ddl_no_target_change=%llu "
              "superseded_updates=%llu batched_updates=%llu early_chunked=%llu early_abandoned=%llu "
              "merged_changes=%llu evidence_assumed=%llu evidence_refused=%llu\n",
              flow_name_.c_str(), state, static_cast<unsigned long long>(counters.applied),
              static_cast<unsigned long long>(counters.skipped_duplicates),
              static_cast<unsigned long long>(counters.not_applied_changes),
              static_cast<unsigned long long>(counters.statements), static_cast<unsigned long long>(figures.batches),
              static_cast<unsigned long long>(figures.start_offset),
              static_cast<unsigned long long>(figures.consumer_offset),
              static_cast<unsigned long long>(figures.next_log_offset), seconds,
              seconds > 0 ? static_cast<double>(counters.applied) / seconds : 0.0,
              static_cast<unsigned long long>(counters.snapshot_in_copy),
              static_cast<unsigned long long>(counters.snapshot_skips),
              static_cast<unsigned long long>(counters.ddl_applied),
              static_cast<unsigned long long>(counters.ddl_no_target_change),
              static_cast<unsigned long long>(counters.superseded_updates),
              static_cast<unsigned long long>(counters.batched_updates),
              static_cast<unsigned long long>(counters.early_chunked),
              static_cast<unsigned long long>(counters.early_abandoned),
              static_cast<unsigned long long>(counters.merged_changes),
              static_cast<unsigned long long>(counters.assumed_evidence_batches),
              static_cast<unsigned long long>(counters.assumed_evidence_refused));
  std::fflush(stdout);
}

void ApplyProgress::Show(const Counters& counters, const std::function<ProgressFigures()>& figures) {
  const auto now = Clock::now();
  if (!tty_) {
    if (now - last_progress_ < kProgressInterval) return;
    last_progress_ = now;
    Print("running", counters, figures());
    return;
  }
  if (now - last_progress_ < kTerminalRedrawInterval) return;
  const double seconds = std::chrono::duration<double>(now - last_progress_).count();
  const uint64_t applied_since = counters.applied - applied_at_last_progress_;
  last_progress_ = now;
  applied_at_last_progress_ = counters.applied;
  const ProgressFigures f = figures();
  // Not yet applied: records not read yet, plus transactions read and waiting for their batch.
  const uint64_t lag = f.log_end - f.next_log_offset + f.waiting;
  std::printf("\r\033[Kapply %s: applied %llu (%.0f tx/s), skipped %llu duplicates | lag %llu log records | "
              "consumer offset %llu of %llu",
              flow_name_.c_str(), static_cast<unsigned long long>(counters.applied),
              seconds > 0 ? static_cast<double>(applied_since) / seconds : 0.0,
              static_cast<unsigned long long>(counters.skipped_duplicates), static_cast<unsigned long long>(lag),
              static_cast<unsigned long long>(f.consumer_offset), static_cast<unsigned long long>(f.log_end));
  std::fflush(stdout);
  progress_line_open_ = true;
}

}  // namespace trellara::cli::apply
