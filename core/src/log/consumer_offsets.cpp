// consumer_offsets.cpp — atomic consumer offset files and segment retention (consumer_offsets.h).
// Never deletes a segment some registered consumer still needs, never the active segment.
#include "trellara/log/consumer_offsets.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <vector>

#include "trellara/log/crc32c.h"
#include "trellara/log/atomic_file.h"
#include "trellara/log/format.h"
#include "trellara/log/retention.h"
#include "trellara/log/scan.h"

namespace trellara::log {
namespace {

std::string ConsumerFileText(uint64_t next_offset) {
  char body[96];
  std::snprintf(body, sizeof body, "trellara-consumer-offset v1 next_offset=%" PRIu64, next_offset);
  uint32_t crc = Crc32c(body, std::strlen(body));
  char line[128];
  std::snprintf(line, sizeof line, "%s crc32c=%08x\n", body, crc);
  return line;
}

}  // namespace

Status ValidateConsumerName(const std::string& name) {
  bool ok = !name.empty() && name.size() <= 64 && name[0] != '.';
  for (char c : name) {
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                c == '-' || c == '.');
  }
  if (!ok) {
    return MakeError("consumer name '" + name +
                     "' is invalid; use 1-64 characters of letters, digits, '_', '-', '.', not starting with '.'");
  }
  return Status::Ok();
}

Status WriteConsumerOffset(LogDevice& device, const std::string& dir, const std::string& name, uint64_t next_offset) {
  TRELLARA_TRY(ValidateConsumerName(name));
  const std::string consumers = JoinPath(dir, kConsumersDirName);
  TRELLARA_TRY(device.MakeDirectory(consumers));
  const std::string final_path = JoinPath(consumers, name);
  const std::string text = ConsumerFileText(next_offset);
  Status status = WriteFileAtomically(device, consumers, name, "." + name + ".tmp", text);
  if (!status.ok()) {
    return MakeError("recording offset " + std::to_string(next_offset) + " of consumer " + name + " in " +
                     final_path + " failed: " + status.error().message +
                     "; the file holds the previous offset or this one, whole");
  }
  return Status::Ok();
}

Result<std::map<std::string, uint64_t>> ReadConsumerOffsets(LogDevice& device, const std::string& dir) {
  std::map<std::string, uint64_t> offsets;
  const std::string consumers = JoinPath(dir, kConsumersDirName);
  auto exists = device.Exists(consumers);
  if (!exists.ok()) return exists.error();
  if (!*exists) return offsets;
  auto names = device.ListDirectory(consumers);
  if (!names.ok()) return names.error();
  for (const auto& name : *names) {
    if (!ValidateConsumerName(name).ok()) continue;  // temporary files start with '.'
    const std::string path = JoinPath(consumers, name);
    auto file = device.OpenFileReadOnly(path);
    if (!file.ok()) {
      // Listed, then unregistered (its file removed) before it was opened: no longer a consumer.
      auto still = device.Exists(path);
      if (still.ok() && !*still) continue;
      return file.error();
    }
    char buf[160] = {};
    auto n = device.ReadAt(*file, 0, buf, sizeof buf - 1);
    device.CloseFile(*file);
    if (!n.ok()) return n.error();
    unsigned long long value = 0;
    unsigned crc = 0;
    int consumed = 0;
    bool parsed = std::sscanf(buf, "trellara-consumer-offset v1 next_offset=%llu crc32c=%8x\n%n", &value, &crc,
                              &consumed) == 2;
    if (!parsed || ConsumerFileText(value) != std::string(buf, *n)) {
      return MakeError("consumer offset file " + path +
                       " is damaged; it is written atomically, so this is disk damage or a manual edit: "
                       "rewrite it with the consumer's durable offset, or remove it to unregister the consumer");
    }
    offsets[name] = value;
  }
  return offsets;
}

Result<ReclaimReport> ReclaimSegments(LogDevice& device, const std::string& dir) {
  // One rule for deletion (retention.h); without a ceiling nobody is marked lost.
  auto applied = ApplyRetention(device, dir, 0);
  if (!applied.ok()) return applied.error();
  return ReclaimReport{applied->segments_deleted, applied->bytes_deleted, applied->retained_from_offset};
}

}  // namespace trellara::log
