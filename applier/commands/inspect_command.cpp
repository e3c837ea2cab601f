// inspect_command.cpp — `trellara inspect-transaction`: renders one record for a person or a tool.
//
// Reads a record from a file (--file, the raw encoded Record) or from a flow log (--dir and
// --offset: the durable, CRC-checked frame at that offset) and prints it with core's renderers; a
// relay progress marker is shown as such. Never repairs, filters or re-encodes what it reads; a
// record that does not decode is an error naming the file (or directory and offset) and what is
// wrong.
#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "commands/commands.h"
#include "commands/log_record_view.h"
#include "trellara/record/codec.h"
#include "trellara/capture/relay_progress.h"
#include "trellara/record/render.h"

namespace trellara::cli {
// Named, not anonymous: the command files compile as unity batches (CMakeLists.txt).
namespace inspect_command {
namespace {

struct InspectOptions {
  std::string file;
  std::string dir;
  std::optional<uint64_t> offset;
  OutputFormat format = OutputFormat::Text;
};

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CommandFailed("cannot open " + path + ": " + std::strerror(errno) + "; check the path");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw CommandFailed("cannot read " + path + ": " + std::strerror(errno));
  return bytes;
}

void PrintRecord(const std::string& bytes, const std::string& source, OutputFormat format) {
  auto record = DecodeRecord(bytes);
  if (!record.ok())
    throw CommandFailed(source + " does not hold a valid trellara record: " + record.error().message);
  auto rendered = format == OutputFormat::Json ? RenderRecordJson(*record, true) : RenderRecordText(*record);
  if (!rendered.ok()) throw CommandFailed(source + ": " + rendered.error().message);
  std::cout << *rendered;
  if (format == OutputFormat::Json) std::cout << "\n";
}

void RunInspectFile(const InspectOptions& opt) { PrintRecord(ReadWholeFile(opt.file), opt.file, opt.format); }

void PrintProgressMarker(const std::string& dir, const log::LogRecord& frame, OutputFormat format) {
  auto lsn = ProgressMarkerLsn(frame);
  if (!lsn)
    throw CommandFailed("offset " + std::to_string(frame.offset) + " of " + dir + " is a progress marker whose " +
                        std::to_string(frame.payload.size()) +
                        "-byte payload is not an 8-byte LSN; the log is damaged, run `trellara log inspect --dir " +
                        dir + "`");
  if (format == OutputFormat::Json) {
    nlohmann::ordered_json j{{"type", "progress"},
                             {"log_offset", frame.offset},
                             {"commit_lsn", FormatLsn(frame.commit_lsn)},
                             {"covered_lsn", FormatLsn(*lsn)},
                             {"checksum_status", "n/a"}};
    std::cout << j.dump(2) << "\n";
    return;
  }
  std::cout << "record:          progress marker (the relay confirmed WAL that produced no records)\n"
            << "log offset:      " << frame.offset << "\n"
            << "covers through:  " << FormatLsn(*lsn) << "\n"
            << "checksum status: n/a\n";
}

void RunInspectLog(const InspectOptions& opt) {
  auto device = OpenLogDeviceForReading();
  log::LogRecord frame = ReadFrameAt(*device, opt.dir, *opt.offset);
  if (frame.type == kProgressRecordType) return PrintProgressMarker(opt.dir, frame, opt.format);
  const std::string source = "offset " + std::to_string(frame.offset) + " of " + opt.dir;
  if (!IsTransactionRecordType(frame.type))
    throw CommandFailed(source + " is a frame of type " + FrameTypeName(frame.type) +
                            ", which is not a transaction record; list the log with `trellara log records --dir " +
                            opt.dir + "`",
                        2);
  if (opt.format == OutputFormat::Text) std::cout << "log offset:      " << frame.offset << "\n";
  PrintRecord(std::string(frame.payload.begin(), frame.payload.end()), source, opt.format);
}

void RunInspect(const InspectOptions& opt) {
  const bool by_file = !opt.file.empty();
  const bool by_offset = !opt.dir.empty() || opt.offset.has_value();
  if (by_file == by_offset || (by_offset && (opt.dir.empty() || !opt.offset)))
    throw CommandFailed("inspect-transaction needs exactly one source: --file F, or --dir D together with --offset N",
                        2);
  if (by_file) return RunInspectFile(opt);
  RunInspectLog(opt);
}

}  // namespace
}  // namespace inspect_command

void RegisterInspectTransaction(CLI::App& app) {
  using namespace inspect_command;
  auto opt = std::make_shared<InspectOptions>();
  auto* cmd = app.add_subcommand("inspect-transaction", "render one log record (envelope, chunk, manifest, "
                                                        "commit marker, progress marker) with its checksum status");
  cmd->add_option("--file", opt->file, "file holding one encoded record")->check(CLI::ExistingFile);
  cmd->add_option("--dir", opt->dir, "a flow's log directory (with --offset)");
  cmd->add_option("--offset", opt->offset, "log offset of the record to render (with --dir)");
  AddFormatOption(cmd, opt->format);
  cmd->callback([opt] { RunInspect(*opt); });
}

}  // namespace trellara::cli
