// source_timelines.cpp — see source_timelines.h.
#include "pg/source_timelines.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "trellara/record/envelope.h"

namespace trellara::cli {

Result<std::optional<LogTimeline>> ReadLogTimelineFile(const std::string& log_directory) {
  const std::string path = log_directory + "/TIMELINE";
  std::ifstream in(path);
  if (!in) {
    if (errno == ENOENT) return std::optional<LogTimeline>();
    return MakeError("cannot read " + path + " (the timeline the log was started on): " + std::strerror(errno));
  }
  std::stringstream text;
  text << in.rdbuf();
  auto timeline = ParseLogTimeline(text.str());
  if (!timeline)
    return MakeError(path + " " + timeline.error().message +
                     "; it is written by the flow's relay: restore it or find out why it changed");
  return std::optional<LogTimeline>(*timeline);
}

Result<TargetTimelineFacts> ReadTargetTimelineFacts(PgConnection& target, const std::string& flow, uint64_t branch_lsn) {
  auto r = target.ExecParams(
      "SELECT (SELECT max(timeline) FROM trellara.source_timelines WHERE flow = $1), count(*), min(commit_lsn), "
      "max(commit_lsn), (SELECT max(commit_lsn) FROM trellara.applied_transactions WHERE flow = $1) "
      "FROM trellara.applied_transactions WHERE flow = $1 AND commit_lsn > $2::pg_lsn",
      {flow, FormatLsn(branch_lsn)});
  if (!r.ok())
    return MakeError("reading the source timelines and dedup rows of flow " + flow + " on the target failed: " +
                     r.Describe());
  TargetTimelineFacts facts;
  if (auto tli = r.Value(0, 0)) facts.applied_timeline = static_cast<uint32_t>(std::stoul(*tli));
  facts.applied_past_branch = std::stoull(r.Value(0, 1).value_or("0"));
  if (auto v = r.Value(0, 2)) facts.first_past_branch = ParseLsn(*v).value_or(0);
  if (auto v = r.Value(0, 3)) facts.last_past_branch = ParseLsn(*v).value_or(0);
  if (auto v = r.Value(0, 4)) facts.max_applied_lsn = ParseLsn(*v).value_or(0);
  return facts;
}

}  // namespace trellara::cli
