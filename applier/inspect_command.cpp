// inspect_command.cpp — `trellara inspect-transaction`: renders one record for a person or a tool.
//
// Reads a record from a file (--file, the raw encoded Record) and prints it with core's
// renderers. Never repairs, filters or re-encodes what it reads; a record that does not decode is
// an error naming the file and what is wrong. Reading by log offset (--dir/--offset) arrives with
// the capture issue.
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>

#include "commands.h"
#include "trellara/codec.h"
#include "trellara/render.h"

namespace trellara::cli {

namespace {

struct InspectOptions {
  std::string file;
  OutputFormat format = OutputFormat::Text;
};

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CommandFailed("cannot open " + path + ": " + std::strerror(errno) + "; check the path");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw CommandFailed("cannot read " + path + ": " + std::strerror(errno));
  return bytes;
}

void RunInspect(const InspectOptions& opt) {
  std::string bytes = ReadWholeFile(opt.file);
  auto record = DecodeRecord(bytes);
  if (!record.ok())
    throw CommandFailed(opt.file + " does not hold a valid trellara record: " + record.error().message);
  auto rendered = opt.format == OutputFormat::Json ? RenderRecordJson(*record, true) : RenderRecordText(*record);
  if (!rendered.ok()) throw CommandFailed(opt.file + ": " + rendered.error().message);
  std::cout << *rendered;
  if (opt.format == OutputFormat::Json) std::cout << "\n";
}

}  // namespace

void RegisterInspectTransaction(CLI::App& app) {
  auto opt = std::make_shared<InspectOptions>();
  auto* cmd = app.add_subcommand("inspect-transaction", "render one log record (envelope, chunk, manifest, "
                                                        "commit marker) with its checksum status");
  cmd->add_option("--file", opt->file, "file holding one encoded record")->required()->check(CLI::ExistingFile);
  AddFormatOption(cmd, opt->format);
  cmd->callback([opt] { RunInspect(*opt); });
}

}  // namespace trellara::cli
