// log_record_view.cpp — reads one frame of a flow log for the CLI and names its type.
// Never writes to the log and never takes the writer lock: a running relay may be appending.
#include "commands/log_record_view.h"

#include "trellara/log/uring_device.h"
#include "trellara/capture/relay_progress.h"

namespace trellara::cli {

namespace {
constexpr uint8_t TypeByte(log::RecordType type) { return static_cast<uint8_t>(type); }
}  // namespace

std::string FrameTypeName(uint8_t frame_type) {
  switch (frame_type) {
    case TypeByte(log::RecordType::Envelope): return "envelope";
    case TypeByte(log::RecordType::Chunk): return "chunk";
    case TypeByte(log::RecordType::Manifest): return "manifest";
    case TypeByte(log::RecordType::CommitMarker): return "commit_marker";
    case kProgressRecordType: return "progress";
    case static_cast<uint8_t>(log::RecordType::Test): return "test";
    default: return "unknown(" + std::to_string(frame_type) + ")";
  }
}

bool IsTransactionRecordType(uint8_t frame_type) {
  return frame_type == TypeByte(log::RecordType::Envelope) || frame_type == TypeByte(log::RecordType::Chunk) ||
         frame_type == TypeByte(log::RecordType::Manifest) || frame_type == TypeByte(log::RecordType::CommitMarker);
}

std::optional<uint64_t> ProgressMarkerLsn(const log::LogRecord& record) {
  if (record.type != kProgressRecordType) return std::nullopt;
  auto marker = DecodeProgressMarker(record.payload.data(), record.payload.size());
  if (!marker) return std::nullopt;
  return marker->lsn;
}

std::unique_ptr<log::LogDevice> OpenLogDeviceForReading() {
  auto device = log::OpenUringDevice(8);
  if (!device.ok()) throw CommandFailed("cannot set up io_uring to read the log: " + device.error().message);
  return std::move(device).value();
}

std::unique_ptr<log::LogReader> OpenLogForReading(log::LogDevice& device, const std::string& dir) {
  auto exists = device.Exists(dir);
  if (!exists.ok()) throw CommandFailed("cannot look at log directory " + dir + ": " + exists.error().message);
  if (!*exists)
    throw CommandFailed("log directory " + dir + " does not exist; pass the flow's log directory with --dir "
                        "(SELECT log_directory FROM trellara.status())",
                        2);
  auto reader = log::LogReader::Open(device, dir);
  if (!reader.ok())
    throw CommandFailed("cannot open log " + dir + " for reading: " + reader.error().message +
                        "; run `trellara log inspect --dir " + dir + "` for its health");
  return std::move(reader).value();
}

log::LogRecord ReadFrameAt(log::LogDevice& device, const std::string& dir, uint64_t offset) {
  auto reader = OpenLogForReading(device, dir);
  Status seek = reader->Seek(offset);
  if (!seek.ok())
    throw CommandFailed("cannot read offset " + std::to_string(offset) + " of " + dir + ": " + seek.error().message +
                            "; run `trellara log inspect --dir " + dir + "` for the valid offsets",
                        2);
  auto next = reader->Next();
  if (!next.ok())
    throw CommandFailed("cannot read offset " + std::to_string(offset) + " of " + dir + ": " + next.error().message +
                        "; run `trellara log inspect --dir " + dir + "` to locate the damage");
  if (!next->has_value())
    throw CommandFailed("offset " + std::to_string(offset) + " is not a durable record of " + dir +
                            " (it is past the durable end); run `trellara log records --dir " + dir + "` to list the records",
                        2);
  return std::move(**next);
}

}  // namespace trellara::cli
