// failover/log_timeline.cpp — the relay's check, at start, that its log was written on this
// server's timeline (issue 41; docs/decisions.md "A relay after promotion starts a new log").
// pg_basebackup copies pg_trellara/ with the rest of PGDATA, so a promoted standby holds a stale
// copy of the old primary's log whose tail is not what the synced slot says. The relay must never
// append to it: the copy is moved aside (kept, never deleted) and a new log is started from the
// slot's confirmed position. Every log records the timeline it was started on in a TIMELINE file.
// Plain C frames only (file functions raise ERROR); the rule itself is core DecideLogTimeline.
extern "C" {
#include "postgres.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access/timeline.h"
#include "access/xlog.h"
#include "miscadmin.h"
#include "storage/fd.h"
}

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "failover/failover.h"
#include "pg/guard.h"
#include "trellara/capture/slot_sync.h"

namespace trellara::failover {

namespace {

constexpr char kTimelineFile[] = "TIMELINE";

// The timeline recorded in `dir`/TIMELINE, 0 when the file is absent.
TimeLineID ReadRecordedTimeline(const char* dir) {
  char path[MAXPGPATH];
  snprintf(path, sizeof path, "%s/%s", dir, kTimelineFile);
  int fd = OpenTransientFile(path, O_RDONLY | PG_BINARY);
  if (fd < 0) {
    if (errno == ENOENT) return 0;
    ereport(ERROR, (errcode_for_file_access(), errmsg("trellara relay cannot open \"%s\": %m", path)));
  }
  char text[32] = {0};
  ssize_t n = read(fd, text, sizeof text - 1);
  int save_errno = errno;
  CloseTransientFile(fd);
  errno = save_errno;
  if (n < 0) ereport(ERROR, (errcode_for_file_access(), errmsg("trellara relay cannot read \"%s\": %m", path)));
  char* end = nullptr;
  unsigned long tli = strtoul(text, &end, 10);
  if (end == text || tli == 0 || tli > UINT32_MAX)
    ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
                    errmsg("trellara relay: \"%s\" does not hold a timeline (\"%s\")", path, text),
                    errhint("It records the timeline the log was started on; restore it or move the log aside.")));
  return static_cast<TimeLineID>(tli);
}

// Writes `dir`/TIMELINE durably (temporary file, fsync, durable rename).
// Writes `dir`/TIMELINE durably (temporary file, fsync, durable rename): the timeline and, on a
// timeline that branched off another, where (the server's timeline history): the applier compares
// the target with that branch point (core DecideTimelineContinuity).
void RecordTimeline(const char* dir, TimeLineID tli) {
  char path[MAXPGPATH];
  char tmp[MAXPGPATH];
  snprintf(path, sizeof path, "%s/%s", dir, kTimelineFile);
  snprintf(tmp, sizeof tmp, "%s/%s.tmp", dir, kTimelineFile);
  TimeLineID parent = 0;
  XLogRecPtr branch = InvalidXLogRecPtr;
  if (tli > 1) {
    // The history's first entry is this timeline; the next, its parent, ends at the switch point.
    List* history = readTimeLineHistory(tli);
    if (list_length(history) > 1) {
      auto* entry = static_cast<TimeLineHistoryEntry*>(list_nth(history, 1));
      parent = entry->tli;
      branch = entry->end;
    }
  }
  char text[128] = {0};
  pg::GuardEntry("trellara relay timeline record", [&] {
    trellara::LogTimeline record{.timeline = tli, .parent_timeline = parent, .branch_lsn = branch};
    strlcpy(text, FormatLogTimeline(record).c_str(), sizeof text);
  });
  int fd = OpenTransientFile(tmp, O_WRONLY | O_CREAT | O_TRUNC | PG_BINARY);
  if (fd < 0) ereport(ERROR, (errcode_for_file_access(), errmsg("trellara relay cannot create \"%s\": %m", tmp)));
  const int len = static_cast<int>(strlen(text));
  errno = 0;
  if (write(fd, text, len) != len) {
    if (errno == 0) errno = ENOSPC;
    int save_errno = errno;
    CloseTransientFile(fd);
    errno = save_errno;
    ereport(ERROR, (errcode_for_file_access(), errmsg("trellara relay cannot write \"%s\": %m", tmp)));
  }
  if (pg_fsync(fd) != 0) {
    int save_errno = errno;
    CloseTransientFile(fd);
    errno = save_errno;
    ereport(ERROR, (errcode_for_file_access(), errmsg("trellara relay cannot fsync \"%s\": %m", tmp)));
  }
  CloseTransientFile(fd);
  (void)durable_rename(tmp, path, ERROR);
}

bool DirectoryExists(const char* dir) {
  struct stat st;
  return stat(dir, &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

LogTimeline PrepareLogForTimeline(const char* flow_name, const char* log_directory, char* refusal,
                                  size_t refusal_bytes) {
  const TimeLineID current = GetWALInsertionTimeLine();
  const bool exists = DirectoryExists(log_directory);
  const TimeLineID recorded = exists ? ReadRecordedTimeline(log_directory) : 0;
  LogTimelineDecision decision = LogTimelineDecision::kUse;
  char aside[MAXPGPATH] = {0};
  pg::GuardEntry("trellara relay log timeline", [&] {
    decision = DecideLogTimeline(recorded == 0 ? std::nullopt : std::optional<uint32_t>(recorded), current);
    strlcpy(aside, SetAsideLogDirectory(log_directory, recorded).c_str(), sizeof aside);
  });
  switch (decision) {
    case LogTimelineDecision::kUse:
      return LogTimeline::kOwn;
    case LogTimelineDecision::kRecord:
      if (pg_mkdir_p(const_cast<char*>(log_directory), S_IRWXU) != 0 && errno != EEXIST)
        ereport(ERROR, (errcode_for_file_access(),
                        errmsg("trellara relay of flow \"%s\" cannot create log directory \"%s\": %m", flow_name,
                               log_directory)));
      RecordTimeline(log_directory, current);
      return LogTimeline::kOwn;
    case LogTimelineDecision::kRefuse:
      snprintf(refusal, refusal_bytes,
               "the log \"%s\" of flow \"%s\" was started on timeline %u, later than this server's timeline %u: it "
               "is not this server's log HINT: move the directory away if it was copied here by mistake, then "
               "SELECT trellara.start_flow('%s'); the relay starts a new log from the slot",
               log_directory, flow_name, recorded, current, flow_name);
      return LogTimeline::kRefuse;
    case LogTimelineDecision::kSetAside:
      break;
  }
  if (DirectoryExists(aside)) {
    snprintf(refusal, refusal_bytes,
             "the log \"%s\" of flow \"%s\" was written on timeline %u (this server is on %u, it was promoted) and "
             "cannot be moved aside: \"%s\" exists HINT: move one of them away, then SELECT trellara.start_flow('%s')",
             log_directory, flow_name, recorded, current, aside, flow_name);
    return LogTimeline::kRefuse;
  }
  if (rename(log_directory, aside) != 0)
    ereport(ERROR, (errcode_for_file_access(),
                    errmsg("trellara relay of flow \"%s\" cannot move the log of timeline %u \"%s\" aside to \"%s\": %m",
                           flow_name, recorded, log_directory, aside)));
  char parent[MAXPGPATH];
  strlcpy(parent, log_directory, sizeof parent);
  get_parent_directory(parent);
  fsync_fname(parent, true);
  if (pg_mkdir_p(const_cast<char*>(log_directory), S_IRWXU) != 0 && errno != EEXIST)
    ereport(ERROR, (errcode_for_file_access(),
                    errmsg("trellara relay of flow \"%s\" cannot create log directory \"%s\": %m", flow_name,
                           log_directory)));
  RecordTimeline(log_directory, current);
  fsync_fname(parent, true);
  ereport(LOG, (errmsg("trellara relay of flow \"%s\": the server was promoted (timeline %u, the log was written on "
                       "timeline %u); the old log is kept in \"%s\" and a new log starts in \"%s\" from the slot's "
                       "confirmed position",
                       flow_name, current, recorded, aside, log_directory)));
  return LogTimeline::kNewLogAfterPromotion;
}

}  // namespace trellara::failover
