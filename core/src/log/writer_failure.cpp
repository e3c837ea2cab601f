// writer_failure.cpp — the durable "writer failed" record (see writer_failure.h). Written only
// atomically (temp file, fdatasync, rename, directory fsync); never trusted when damaged.
#include "trellara/log/writer_failure.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "trellara/log/crc32c.h"
#include "trellara/log/atomic_file.h"

namespace trellara::log {
namespace {

std::string FailureFileText(const WriterFailureState& state) {
  char body[160];
  std::snprintf(body, sizeof body,
                "trellara-writer-failed v1 durable_end=%" PRIu64 " segment=%" PRIu64 " position=%" PRIu64,
                state.durable_end, state.segment_first_offset, state.durable_position);
  const uint32_t crc = Crc32c(body, std::strlen(body));
  char line[200];
  std::snprintf(line, sizeof line, "%s crc32c=%08x\n", body, crc);
  return line;
}

}  // namespace

Status RecordWriterFailure(LogDevice& device, const std::string& dir, const WriterFailureState& state) {
  const std::string final_path = JoinPath(dir, kWriterFailedFileName);
  const std::string text = FailureFileText(state);
  Status status = WriteFileAtomically(device, dir, kWriterFailedFileName,
                                      std::string(kWriterFailedFileName) + ".tmp", text);
  if (!status.ok()) {
    return MakeError("recording the writer failure in " + final_path + " failed: " + status.error().message);
  }
  return Status::Ok();
}

Result<std::optional<WriterFailureState>> ReadWriterFailure(LogDevice& device, const std::string& dir) {
  const std::string path = JoinPath(dir, kWriterFailedFileName);
  auto exists = device.Exists(path);
  if (!exists.ok()) return exists.error();
  if (!*exists) return std::optional<WriterFailureState>();
  auto file = device.OpenFileReadOnly(path);
  if (!file.ok()) return file.error();
  char buf[256] = {};
  auto n = device.ReadAt(*file, 0, buf, sizeof buf - 1);
  device.CloseFile(*file);
  if (!n.ok()) return n.error();
  unsigned long long durable_end = 0, segment = 0, position = 0;
  unsigned crc = 0;
  const bool parsed = std::sscanf(buf, "trellara-writer-failed v1 durable_end=%llu segment=%llu position=%llu crc32c=%8x",
                                  &durable_end, &segment, &position, &crc) == 4;
  WriterFailureState state{durable_end, segment, position};
  if (!parsed || FailureFileText(state) != std::string(buf, *n)) {
    return MakeError("writer failure record " + path +
                     " is damaged; it is written atomically, so this is disk damage or a manual edit. The log's "
                     "durable point after an fdatasync failure is unknown: restore the log from a backup or re-seed "
                     "the flow");
  }
  return std::optional<WriterFailureState>(state);
}

Status ClearWriterFailure(LogDevice& device, const std::string& dir) {
  TRELLARA_TRY(device.Remove(JoinPath(dir, kWriterFailedFileName)));
  return device.SyncDirectory(dir);
}

}  // namespace trellara::log
