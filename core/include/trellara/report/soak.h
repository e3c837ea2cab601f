// soak.h — the pure decisions of `trellara soak` (docs/soak.md): the duration
// argument, the memory figures read from /proc/<pid>/status, the end-to-end lag percentiles, the
// checks and the summary the command prints (text, or the JSON object tools read).
//
// The adapter (applier/commands/soak_*.cpp) drives the workload, reads /proc and both servers and
// hands the facts here. This file never reads files, the clock or a server, and never reports a
// check as passed that it was not given evidence for.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trellara/base/result.h"

namespace trellara::soak {

// `30s`, `10m`, `1h` or plain seconds (`45`); at least 1 second, at most kDurationSecondsMax.
// The error names the argument and the accepted forms.
constexpr uint64_t kDurationSecondsMax = 7 * 24 * 3600;
Result<uint64_t> ParseDurationSeconds(std::string_view text, std::string_view option_name);

// The value in KiB of one line of /proc/<pid>/status (`VmHWM:     1234 kB`); nullopt when the
// field is absent (a kernel thread, a zombie) or not in kB.
std::optional<uint64_t> ParseProcStatusKib(std::string_view status_text, std::string_view field);

// Nearest-rank percentile (p in (0, 100]) of `values`, which need not be sorted; 0 when empty.
double Percentile(std::vector<double> values, double p);

struct LagSummary {
  double p50_ms = 0, p99_ms = 0, max_ms = 0;
  uint64_t samples = 0;
};
LagSummary SummarizeLag(const std::vector<double>& lag_ms);

// Memory seen in one process over the run; peak_hwm_kib is the largest VmHWM read (the kernel's
// own high-water mark, so a spike between two samples is not missed).
struct ProcessMemory {
  std::optional<int64_t> pid;  // nullopt: the process was never found
  uint64_t samples = 0;        // successful reads of /proc/<pid>/status
  uint64_t peak_hwm_kib = 0;
  uint64_t max_rss_kib = 0;
  // VmRSS split as sampled (kernels >= 4.5): private anonymous memory (the process's own heap —
  // what a memory ceiling of the relay is about), file-backed pages, and shared memory. A
  // PostgreSQL backend's VmRSS/VmHWM also count the shared buffers it has touched, which grow over
  // hours without the process allocating anything (docs/soak.md). nullopt: the kernel has no split.
  std::optional<uint64_t> max_rss_anon_kib, max_rss_file_kib, max_rss_shmem_kib;
};

struct Check {
  std::string name;
  bool ok = false;
  std::string detail;
};

// The soak table's row count and order-independent digest on one side; error set when the side
// could not be read (the table missing, the server unreachable).
struct TableDigest {
  uint64_t rows = 0;
  std::string digest;  // numeric sum as text, compared as text
  std::string error;
};

// table_digest: source and target hold the same rows of `table`.
Check CompareTableDigests(const std::string& table, const TableDigest& source, const TableDigest& target);
// memory_limit: each sampled process's peak VmHWM is at most limit_mib; a process never sampled
// fails the check (no evidence is not a pass).
Check MemoryLimitCheck(const ProcessMemory& relay, const ProcessMemory& applier, uint64_t limit_mib);
// settled: every committed transaction was seen applied on the target within the settle timeout.
Check SettledCheck(uint64_t committed, uint64_t applied, uint64_t settle_timeout_s,
                   const std::string& first_pending);

struct Report {
  std::string flow;
  std::string table;
  double duration_s = 0;
  uint64_t committed = 0, rolled_back = 0, savepoint_rollbacks = 0;
  uint64_t rows_inserted = 0, rows_updated = 0, rows_deleted = 0, rows_rolled_back = 0;
  uint64_t rows_per_transaction = 0;
  ProcessMemory relay, applier;
  LagSummary lag;
  std::vector<Check> checks;
  bool ok() const;  // every check passed (and there is at least one)
};

std::string RenderReportJson(const Report& report);
std::string RenderReportText(const Report& report);

}  // namespace trellara::soak
