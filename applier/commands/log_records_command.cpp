// log_records_command.cpp — `trellara log records --dir D [--from OFFSET] [--format text|json]`:
// lists the durable records of a flow log, one line per record, for tests and for operators
// comparing the log with the source (offset, type, commit LSN, xid, counts, checksum status).
//
// Reads through core's LogReader only (durable, CRC-checked frames; never the torn tail) and may
// run while the relay appends. It never writes or repairs the log and never skips a record: a
// frame that cannot be read or a record that does not decode ends the listing with a non-zero
// exit and a message naming the offset.
#include <CLI/CLI.hpp>

#include <iostream>
#include <nlohmann/json.hpp>

#include "commands/commands.h"
#include "commands/log_record_view.h"
#include "trellara/record/codec.h"
#include "trellara/record/envelope.h"
#include "trellara/capture/relay_progress.h"

namespace trellara::cli {
// Named, not anonymous: the command files compile as unity batches (CMakeLists.txt).
namespace log_records_command {
namespace {

using nlohmann::ordered_json;

struct RecordsOptions {
  std::string dir;
  std::optional<uint64_t> from;
  OutputFormat format = OutputFormat::Text;
};

// The facts of one record as a JSON object (also the source of the text line).
ordered_json DescribeRecord(const std::string& dir, const log::LogRecord& frame) {
  ordered_json j;
  j["offset"] = frame.offset;
  j["type"] = FrameTypeName(frame.type);
  j["commit_lsn"] = FormatLsn(frame.commit_lsn);
  if (frame.type == kProgressRecordType) {
    auto lsn = ProgressMarkerLsn(frame);
    if (!lsn)
      throw CommandFailed("offset " + std::to_string(frame.offset) + " of " + dir + " is a progress marker whose " +
                          std::to_string(frame.payload.size()) + "-byte payload is not an 8-byte LSN; run " +
                          "`trellara inspect-transaction --dir " + dir + " --offset " + std::to_string(frame.offset) +
                          "` and report it");
    j["xid"] = nullptr;
    j["covered_lsn"] = FormatLsn(*lsn);
    j["checksum_status"] = "n/a";
    return j;
  }
  if (!IsTransactionRecordType(frame.type)) {
    j["xid"] = nullptr;
    j["payload_bytes"] = frame.payload.size();
    j["checksum_status"] = "n/a";
    return j;
  }
  auto record = DecodeRecord(std::span<const uint8_t>(frame.payload.data(), frame.payload.size()));
  if (!record.ok())
    throw CommandFailed("record at offset " + std::to_string(frame.offset) + " of " + dir + " (frame type " +
                        FrameTypeName(frame.type) + ") does not decode: " + record.error().message +
                        "; inspect it with `trellara inspect-transaction --dir " + dir + " --offset " +
                        std::to_string(frame.offset) + "`");
  if (static_cast<uint8_t>(TypeOf(*record)) != frame.type)
    throw CommandFailed("record at offset " + std::to_string(frame.offset) + " of " + dir + " is framed as " +
                        FrameTypeName(frame.type) + " but decodes as " + RecordTypeName(TypeOf(*record)) +
                        "; the log is inconsistent, do not apply it");
  const TxIdentity& tx = TxOf(*record);
  j["xid"] = tx.xid;
  if (tx.commit_lsn != frame.commit_lsn) j["record_commit_lsn"] = FormatLsn(tx.commit_lsn);
  Status verified = VerifyRecordChecksum(*record);
  std::string checksum = verified.ok() ? "match" : "mismatch";
  if (const auto* e = std::get_if<Envelope>(&*record)) {
    j["change_count"] = e->changes.size();
    j["checksum"] = HexEncode(e->checksum);
  } else if (const auto* c = std::get_if<Chunk>(&*record)) {
    j["seq"] = c->seq;
    j["partition_id"] = c->partition_id;  // 0 in a strict chunk
    j["event_count"] = c->event_count;
    j["change_count"] = c->changes.size();
    j["checksum"] = HexEncode(c->checksum);
  } else if (const auto* m = std::get_if<Manifest>(&*record)) {
    j["chunk_count"] = m->chunks.size();
    j["total_changes"] = m->total_changes;
    j["checksum"] = HexEncode(m->checksum);
    if (verified.ok()) checksum = "n/a";  // binds to the chunks: the barrier checks it
  } else {
    const auto& k = std::get<CommitMarker>(*record);
    j["total_chunks"] = k.total_chunks;
    j["total_changes"] = k.total_changes;
    checksum = "n/a";  // binds to the manifest: the barrier checks it
  }
  j["checksum_status"] = checksum;
  return j;
}

std::string TextLine(const ordered_json& j) {
  std::string line;
  for (const auto& [key, value] : j.items()) {
    if (!line.empty()) line += ' ';
    line += key + "=" + (value.is_string() ? value.get<std::string>() : value.dump());
  }
  return line;
}

void RunRecords(const RecordsOptions& opt) {
  auto device = OpenLogDeviceForReading();
  auto reader = OpenLogForReading(*device, opt.dir);
  if (opt.from) {
    Status seek = reader->Seek(*opt.from);
    if (!seek.ok())
      throw CommandFailed("cannot start at offset " + std::to_string(*opt.from) + " of " + opt.dir + ": " +
                              seek.error().message,
                          2);
  }
  for (;;) {
    auto next = reader->Next();
    if (!next.ok()) {
      std::cout.flush();
      throw CommandFailed("cannot read offset " + std::to_string(reader->next_offset()) + " of " + opt.dir + ": " +
                          next.error().message);
    }
    if (!next->has_value()) break;
    ordered_json j = DescribeRecord(opt.dir, **next);
    std::cout << (opt.format == OutputFormat::Json ? j.dump() : TextLine(j)) << "\n";
  }
  std::cout.flush();
}

}  // namespace
}  // namespace log_records_command

void RegisterLogRecords(CLI::App& app) {
  using namespace log_records_command;
  CLI::App* log = app.get_subcommand("log");
  auto opt = std::make_shared<RecordsOptions>();
  auto* cmd = log->add_subcommand("records", "list the durable records of a log, one line each: offset, type, "
                                             "commit LSN, xid, counts, checksum status");
  cmd->add_option("--dir", opt->dir, "the flow's log directory")->required();
  cmd->add_option("--from", opt->from, "first offset to list (default: the first in the log)");
  AddFormatOption(cmd, opt->format);
  cmd->callback([opt] { RunRecords(*opt); });
}

}  // namespace trellara::cli
