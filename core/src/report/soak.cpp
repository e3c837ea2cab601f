// soak.cpp — duration parsing, /proc status parsing, lag percentiles, checks and the summary of
// `trellara soak` (soak.h). Pure: no files, no clock, no server.
#include "trellara/report/soak.h"

#include "trellara/base/duration.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>

namespace trellara::soak {

Result<uint64_t> ParseDurationSeconds(std::string_view text, std::string_view option_name) {
  auto bad = [&](const std::string& why) {
    return MakeError("invalid " + std::string(option_name) + " '" + std::string(text) + "': " + why +
                     "; give a whole number of seconds (45), or with a unit: 30s, 10m, 1h");
  };
  auto ms = ParseDurationMs(text, /*bare_unit_ms=*/1000);  // core duration.h: the one parser
  if (!ms) return bad(ms.error().message);
  if (*ms % 1000 != 0) return bad("it is not a whole number of seconds");
  const uint64_t seconds = *ms / 1000;
  if (seconds == 0) return bad("it must be at least 1 second");
  if (seconds > kDurationSecondsMax)
    return bad("it is longer than the limit of " + std::to_string(kDurationSecondsMax) + " seconds (7 days)");
  return seconds;
}

std::optional<uint64_t> ParseProcStatusKib(std::string_view status_text, std::string_view field) {
  size_t pos = 0;
  while (pos < status_text.size()) {
    size_t eol = status_text.find('\n', pos);
    if (eol == std::string_view::npos) eol = status_text.size();
    std::string_view line = status_text.substr(pos, eol - pos);
    pos = eol + 1;
    if (line.size() <= field.size() || line.substr(0, field.size()) != field || line[field.size()] != ':') continue;
    std::string_view rest = line.substr(field.size() + 1);
    while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t')) rest.remove_prefix(1);
    uint64_t value = 0;
    const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), value);
    if (ec != std::errc()) return std::nullopt;
    std::string_view unit(end, static_cast<size_t>(rest.data() + rest.size() - end));
    while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
    if (unit != "kB") return std::nullopt;
    return value;
  }
  return std::nullopt;
}

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  // Nearest rank: the smallest value with at least p% of the values at or below it.
  const double rank = std::ceil(p / 100.0 * static_cast<double>(values.size()));
  const size_t index = rank < 1 ? 0 : std::min(values.size() - 1, static_cast<size_t>(rank) - 1);
  return values[index];
}

LagSummary SummarizeLag(const std::vector<double>& lag_ms) {
  LagSummary s;
  s.samples = lag_ms.size();
  if (lag_ms.empty()) return s;
  s.p50_ms = Percentile(lag_ms, 50);
  s.p99_ms = Percentile(lag_ms, 99);
  s.max_ms = *std::max_element(lag_ms.begin(), lag_ms.end());
  return s;
}

Check CompareTableDigests(const std::string& table, const TableDigest& source, const TableDigest& target) {
  Check c{"table_digest", false, ""};
  if (!source.error.empty() || !target.error.empty()) {
    c.detail = table + " could not be compared:" +
               (source.error.empty() ? std::string() : " source: " + source.error) +
               (target.error.empty() ? std::string() : " target: " + target.error);
    return c;
  }
  const std::string counts = "source " + std::to_string(source.rows) + " rows (digest " + source.digest +
                             "), target " + std::to_string(target.rows) + " rows (digest " + target.digest + ")";
  c.ok = source.rows == target.rows && source.digest == target.digest;
  c.detail = table + ": " + counts +
             (c.ok ? std::string()
                   : "; the target differs from the source: compare with trellara verify --table " + table +
                         " and repair with the reseed command it prints");
  return c;
}

Check MemoryLimitCheck(const ProcessMemory& relay, const ProcessMemory& applier, uint64_t limit_mib) {
  Check c{"memory_limit", true, ""};
  const uint64_t limit_kib = limit_mib * 1024;
  auto one = [&](const char* name, const ProcessMemory& m) {
    std::string part;
    if (!m.pid || m.samples == 0) {
      c.ok = false;
      part = std::string(name) + " never sampled (no evidence of its peak)";
    } else {
      const bool within = m.peak_hwm_kib <= limit_kib;
      if (!within) c.ok = false;
      part = std::string(name) + " (pid " + std::to_string(*m.pid) + ") peak VmHWM " +
             std::to_string(m.peak_hwm_kib) + " KiB " + (within ? "<=" : "EXCEEDS") + " limit " +
             std::to_string(limit_kib) + " KiB";
    }
    c.detail += (c.detail.empty() ? "" : "; ") + part;
  };
  one("relay", relay);
  one("applier", applier);
  return c;
}

Check SettledCheck(uint64_t committed, uint64_t applied, uint64_t settle_timeout_s, const std::string& first_pending) {
  Check c{"settled", committed == applied, ""};
  c.detail = std::to_string(applied) + " of " + std::to_string(committed) + " committed transactions seen applied on the target";
  if (!c.ok)
    c.detail += " within the settle timeout of " + std::to_string(settle_timeout_s) + " s; first not applied: " +
                first_pending + "; run trellara status --config F to see why the applier is behind";
  return c;
}

bool Report::ok() const {
  return !checks.empty() && std::all_of(checks.begin(), checks.end(), [](const Check& c) { return c.ok; });
}

namespace {

nlohmann::ordered_json MemoryJson(const ProcessMemory& m) {
  using J = nlohmann::ordered_json;
  J j;
  j["pid"] = m.pid ? J(*m.pid) : J();
  j["peak_rss_kib"] = m.samples ? J(m.peak_hwm_kib) : J();
  j["max_vmrss_kib"] = m.samples ? J(m.max_rss_kib) : J();
  auto opt = [&](const std::optional<uint64_t>& v) { return m.samples && v ? J(*v) : J(); };
  j["max_rss_anon_kib"] = opt(m.max_rss_anon_kib);
  j["max_rss_file_kib"] = opt(m.max_rss_file_kib);
  j["max_rss_shmem_kib"] = opt(m.max_rss_shmem_kib);
  j["samples"] = m.samples;
  return j;
}

}  // namespace

std::string RenderReportJson(const Report& r) {
  using J = nlohmann::ordered_json;
  J j;
  j["flow"] = r.flow;
  j["table"] = r.table;
  j["duration_s"] = r.duration_s;
  j["rows_per_transaction"] = r.rows_per_transaction;
  j["transactions"] = {{"committed", r.committed},
                       {"rolled_back", r.rolled_back},
                       {"savepoint_rollbacks", r.savepoint_rollbacks}};
  j["rows"] = {{"inserted", r.rows_inserted},
               {"updated", r.rows_updated},
               {"deleted", r.rows_deleted},
               {"rolled_back", r.rows_rolled_back}};
  j["relay"] = MemoryJson(r.relay);
  j["applier"] = MemoryJson(r.applier);
  j["lag_ms"] = {{"p50", r.lag.p50_ms}, {"p99", r.lag.p99_ms}, {"max", r.lag.max_ms}, {"samples", r.lag.samples}};
  j["checks"] = J::array();
  for (const Check& c : r.checks) j["checks"].push_back({{"name", c.name}, {"ok", c.ok}, {"detail", c.detail}});
  j["ok"] = r.ok();
  return j.dump(2) + "\n";
}

std::string RenderReportText(const Report& r) {
  std::ostringstream out;
  auto memory = [](const ProcessMemory& m) {
    if (!m.pid) return std::string("not found");
    if (!m.samples) return "pid " + std::to_string(*m.pid) + ", never sampled";
    std::string split;
    if (m.max_rss_anon_kib && m.max_rss_file_kib && m.max_rss_shmem_kib)
      split = " [max RssAnon " + std::to_string(*m.max_rss_anon_kib) + " KiB private, RssFile " +
              std::to_string(*m.max_rss_file_kib) + " KiB, RssShmem " + std::to_string(*m.max_rss_shmem_kib) + " KiB]";
    return "pid " + std::to_string(*m.pid) + ", peak VmHWM " + std::to_string(m.peak_hwm_kib) + " KiB, max VmRSS " +
           std::to_string(m.max_rss_kib) + " KiB" + split + " (" + std::to_string(m.samples) + " samples)";
  };
  out << "soak flow " << r.flow << " on " << r.table << " for " << r.duration_s << " s ("
      << r.rows_per_transaction << " rows per transaction)\n"
      << "transactions:  " << r.committed << " committed, " << r.rolled_back << " rolled back, "
      << r.savepoint_rollbacks << " rolled back to a savepoint\n"
      << "rows:          " << r.rows_inserted << " inserted, " << r.rows_updated << " updated, " << r.rows_deleted
      << " deleted, " << r.rows_rolled_back << " written and rolled back\n"
      << "relay:         " << memory(r.relay) << "\n"
      << "applier:       " << memory(r.applier) << "\n"
      << "lag (commit on source to applied on target): p50 " << r.lag.p50_ms << " ms, p99 " << r.lag.p99_ms
      << " ms, max " << r.lag.max_ms << " ms (" << r.lag.samples << " transactions)\n";
  for (const Check& c : r.checks) out << (c.ok ? "ok      " : "FAILED  ") << c.name << ": " << c.detail << "\n";
  out << (r.ok() ? "soak passed\n" : "soak FAILED\n");
  return out.str();
}

}  // namespace trellara::soak
