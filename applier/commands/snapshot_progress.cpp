// snapshot_progress.cpp — the progress of `trellara snapshot` while its workers copy: on a
// terminal, one redrawn bar per table; otherwise a structured line per table at most every 5 s
// (and a finished table's line once).
//
// Only prints: of the shared progress it changes nothing but a table's reported_done (its finished
// line is printed once), and it never changes what is copied or recorded.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "snapshot_command_internal.h"

namespace trellara::cli::snapshot_detail {
namespace {

std::string HumanBytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    u++;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", b, units[u]);
  return buf;
}

}  // namespace

SnapshotProgress::SnapshotProgress(std::string flow, std::string run_id, FILE* out)
    : flow_(std::move(flow)), run_id_(std::move(run_id)), out_(out), tty_(::isatty(fileno(out)) == 1) {}

void SnapshotProgress::Tick(const std::vector<SnapshotTable>& tables, std::deque<TableProgress>& progress, bool final) {
  const auto now = Clock::now();
  if (tty_) {
    if (drawn_lines_ > 0) std::fprintf(out_, "\033[%dA", drawn_lines_);
    drawn_lines_ = 0;
    for (size_t i = 0; i < tables.size(); i++) {
      if (tables[i].registration == Registration::Skip) continue;
      const TableProgress& p = progress[i];
      const int total = std::max(1, tables[i].chunks);
      const int done = p.chunks_copied + p.chunks_skipped;
      const int width = 24;
      const int filled = std::min(width, done * width / total);
      const double secs = p.Seconds(now);
      const double rate = secs > 0 ? static_cast<double>(p.rows) / secs : 0;
      const int copied_now = p.chunks_copied;
      const int remaining = total - done;
      std::string eta = "-";
      if (p.failed) {
        eta = "failed";
      } else if (remaining == 0) {
        eta = "done";
      } else if (copied_now > 0) {
        eta = std::to_string(static_cast<long long>(secs / copied_now * remaining)) + "s";
      }
      std::fprintf(out_, "\r\033[K%-32s [%s%s] %3d/%-3d chunks %12llu rows %10s %9.0f rows/s (%s/s) ETA %s\n",
                   tables[i].name.c_str(), std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(),
                   done, total, static_cast<unsigned long long>(p.rows.load()), HumanBytes(p.bytes).c_str(), rate,
                   HumanBytes(secs > 0 ? p.bytes / secs : 0).c_str(), eta.c_str());
      drawn_lines_++;
    }
    std::fflush(out_);
    return;
  }
  if (!final && now - last_line_ < std::chrono::seconds(5)) return;
  last_line_ = now;
  for (size_t i = 0; i < tables.size(); i++) {
    if (tables[i].registration == Registration::Skip) continue;
    TableProgress& p = progress[i];
    const int done = p.chunks_copied + p.chunks_skipped;
    if (!final && (p.reported_done || (p.chunks_copied == 0 && !p.started))) continue;
    const double secs = p.Seconds(now);
    const int remaining = tables[i].chunks - done;
    const char* state = p.failed ? "failed_recoverable" : remaining == 0 ? "copied" : "copying";
    if (p.failed || remaining == 0) p.reported_done = true;  // a finished table's line is printed once
    std::fprintf(out_,
                 "snapshot flow=%s run=%s table=%s state=%s chunks=%d chunks_copied=%d chunks_skipped=%d rows=%llu "
                 "bytes=%llu seconds=%.1f rows_per_s=%.0f eta_s=%.0f\n",
                 flow_.c_str(), run_id_.c_str(), tables[i].name.c_str(), state, tables[i].chunks,
                 p.chunks_copied.load(), p.chunks_skipped.load(), static_cast<unsigned long long>(p.rows.load()),
                 static_cast<unsigned long long>(p.bytes.load()), secs, secs > 0 ? p.rows / secs : 0.0,
                 p.chunks_copied > 0 ? secs / p.chunks_copied * remaining : -1.0);
  }
  std::fflush(out_);
}

}  // namespace trellara::cli::snapshot_detail
