// log_records_cli_test.cpp — `trellara log records` and `trellara inspect-transaction --dir
// --offset` against the real binary over a log written with core's LogWriter: every record is
// listed with its offset, type, commit LSN, xid, counts and checksum status; a progress marker is
// shown as such; an undecodable record or a missing offset is an error naming the offset. The test
// never reads the log by any path other than the commands under test.
#include <catch2/catch.hpp>

#include "cli_support.h"

#include <array>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <sys/wait.h>

#include "log_support/log_test_support.h"
#include "samples.h"
#include "trellara/record/codec.h"
#include "trellara/capture/relay_progress.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_log_records_cli_test {

using namespace trellara;
using trellara::log::LogWriter;
using trellara::log::WriterOptions;
using trellara::log::testing::TempDir;

namespace {

using Run = trellara::testing::CliRun;
Run RunCommand(const std::string& args) { return trellara::testing::RunTrellara(args); }

constexpr uint64_t kProgressLsn = 0x4000000;

void AppendRecord(LogWriter& writer, const Record& record) {
  auto bytes = EncodeRecord(record);
  REQUIRE(bytes.ok());
  auto offset = writer.Append(static_cast<uint8_t>(TypeOf(record)), TxOf(record).commit_lsn,
                              std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size()));
  REQUIRE(offset.ok());
}

// offsets: 0 envelope, 1-2 chunks, 3 manifest, 4 commit marker, 5 progress marker, then `extra`.
void WriteLog(const std::string& dir, const std::vector<std::pair<uint8_t, std::string>>& extra = {}) {
  auto device = log::testing::RealDevice();
  auto writer = LogWriter::Open(*device, dir, WriterOptions{});
  REQUIRE(writer.ok());
  AppendRecord(**writer, testing::SampleEnvelope());
  AppendRecord(**writer, testing::SampleChunk(0));
  AppendRecord(**writer, testing::SampleChunk(1));
  AppendRecord(**writer, testing::SampleManifest());
  AppendRecord(**writer, testing::SampleCommitMarker());
  uint8_t lsn[8];
  for (int i = 0; i < 8; i++) lsn[i] = static_cast<uint8_t>(kProgressLsn >> (8 * i));
  REQUIRE((*writer)->Append(kProgressRecordType, kProgressLsn, std::span<const uint8_t>(lsn, 8)).ok());
  for (const auto& [type, payload] : extra)
    REQUIRE((*writer)
                ->Append(type, kProgressLsn + 1,
                         std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(payload.data()), payload.size()))
                .ok());
  REQUIRE((*writer)->Flush().ok());
}

std::vector<nlohmann::json> JsonLines(const std::string& text) {
  std::vector<nlohmann::json> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    auto parsed = nlohmann::json::parse(line, nullptr, false);
    INFO("line: " << line);
    REQUIRE(!parsed.is_discarded());
    lines.push_back(parsed);
  }
  return lines;
}

}  // namespace

TEST_CASE("log_records_lists_every_record_with_type_commit_lsn_xid_counts_and_checksum", "[cli][log]") {
  TempDir tmp;
  WriteLog(tmp.flow());
  Run r = RunCommand("log records --format json --dir " + tmp.flow());
  INFO(r.all);
  REQUIRE(r.exit_code == 0);
  auto lines = JsonLines(r.out);
  REQUIRE(lines.size() == 6);
  const char* types[] = {"envelope", "chunk", "chunk", "manifest", "commit_marker", "progress"};
  for (size_t i = 0; i < lines.size(); i++) {
    CHECK(lines[i]["offset"] == i);
    CHECK(lines[i]["type"] == types[i]);
  }
  CHECK(lines[0]["commit_lsn"] == "0/3A1F2B0");
  CHECK(lines[0]["xid"] == 7421);
  CHECK(lines[0]["change_count"] == testing::SampleEnvelope().changes.size());
  CHECK(lines[0]["checksum_status"] == "match");
  CHECK(lines[1]["seq"] == 0);
  CHECK(lines[2]["seq"] == 1);
  CHECK(lines[2]["checksum_status"] == "match");
  CHECK(lines[3]["chunk_count"] == 2);
  CHECK(lines[4]["total_chunks"] == testing::SampleCommitMarker().total_chunks);
  CHECK(lines[4]["checksum_status"] == "n/a");
  CHECK(lines[5]["xid"].is_null());
  CHECK(lines[5]["commit_lsn"] == "0/4000000");
  CHECK(lines[5]["covered_lsn"] == "0/4000000");

  Run from = RunCommand("log records --format json --from 4 --dir " + tmp.flow());
  REQUIRE(from.exit_code == 0);
  auto tail = JsonLines(from.out);
  REQUIRE(tail.size() == 2);
  CHECK(tail[0]["offset"] == 4);
  CHECK(tail[1]["type"] == "progress");
}

TEST_CASE("log_records_reports_a_tampered_envelope_as_checksum_mismatch", "[cli][log]") {
  TempDir tmp;
  Envelope tampered = testing::SampleEnvelope();
  REQUIRE(SealEnvelope(tampered).ok());
  tampered.changes[0].new_tuple[0] = Value::Text("999");  // checksum no longer matches the changes
  auto bytes = EncodeRecord(Record(tampered));
  REQUIRE(bytes.ok());
  WriteLog(tmp.flow(), {{1, *bytes}});
  Run r = RunCommand("log records --format json --from 6 --dir " + tmp.flow());
  INFO(r.all);
  REQUIRE(r.exit_code == 0);
  auto lines = JsonLines(r.out);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0]["checksum_status"] == "mismatch");
}

TEST_CASE("log_records_stops_with_an_error_naming_the_offset_of_an_undecodable_record", "[cli][log]") {
  TempDir tmp;
  WriteLog(tmp.flow(), {{1, std::string("\xde\xad\xbe\xef", 4)}});
  Run r = RunCommand("log records --format json --dir " + tmp.flow());
  INFO(r.all);
  CHECK(r.exit_code != 0);
  CHECK(JsonLines(r.out).size() == 6);  // everything before it was listed
  CHECK(r.all.find("record at offset 6 of " + tmp.flow()) != std::string::npos);
  CHECK(r.all.find("does not decode") != std::string::npos);
}

TEST_CASE("log_records_refuses_a_missing_directory_naming_it", "[cli][log]") {
  Run r = RunCommand("log records --dir /nonexistent/trellara-flow");
  CHECK(r.exit_code == 2);
  CHECK(r.all.find("/nonexistent/trellara-flow does not exist") != std::string::npos);
}

TEST_CASE("inspect_transaction_by_offset_renders_the_record_at_that_offset", "[cli][log]") {
  TempDir tmp;
  WriteLog(tmp.flow());
  Run text = RunCommand("inspect-transaction --dir " + tmp.flow() + " --offset 0");
  INFO(text.all);
  CHECK(text.exit_code == 0);
  CHECK(text.out.find("log offset:      0") != std::string::npos);
  CHECK(text.out.find("record:          envelope") != std::string::npos);
  CHECK(text.out.find("checksum status: match") != std::string::npos);
  Run json = RunCommand("inspect-transaction --format json --dir " + tmp.flow() + " --offset 2");
  INFO(json.all);
  CHECK(json.exit_code == 0);
  auto chunk = nlohmann::json::parse(json.out, nullptr, false);
  REQUIRE(!chunk.is_discarded());
  CHECK(chunk["type"] == "chunk");
  CHECK(chunk["seq"] == 1);
}

TEST_CASE("inspect_transaction_by_offset_renders_a_progress_marker_as_such", "[cli][log]") {
  TempDir tmp;
  WriteLog(tmp.flow());
  Run text = RunCommand("inspect-transaction --dir " + tmp.flow() + " --offset 5");
  INFO(text.all);
  CHECK(text.exit_code == 0);
  CHECK(text.out.find("progress marker") != std::string::npos);
  CHECK(text.out.find("0/4000000") != std::string::npos);
  Run json = RunCommand("inspect-transaction --format json --dir " + tmp.flow() + " --offset 5");
  auto marker = nlohmann::json::parse(json.out, nullptr, false);
  REQUIRE(!marker.is_discarded());
  CHECK(marker["type"] == "progress");
  CHECK(marker["covered_lsn"] == "0/4000000");
}

TEST_CASE("inspect_transaction_by_offset_refuses_a_missing_offset_naming_dir_and_offset", "[cli][log]") {
  TempDir tmp;
  WriteLog(tmp.flow());
  Run r = RunCommand("inspect-transaction --dir " + tmp.flow() + " --offset 42");
  CHECK(r.exit_code == 2);
  CHECK(r.all.find("offset 42") != std::string::npos);
  CHECK(r.all.find(tmp.flow()) != std::string::npos);
  CHECK(r.all.find("trellara log records --dir") != std::string::npos);
  CHECK(r.out.empty());
}

TEST_CASE("inspect_transaction_needs_exactly_one_of_file_or_dir_with_offset", "[cli]") {
  TempDir tmp;
  WriteLog(tmp.flow());
  for (std::string args : {std::string("inspect-transaction"), "inspect-transaction --dir " + tmp.flow(),
                           std::string("inspect-transaction --offset 0"),
                           "inspect-transaction --file /etc/hostname --dir " + tmp.flow() + " --offset 0"}) {
    Run r = RunCommand(args);
    INFO(args << ": " << r.all);
    CHECK(r.exit_code == 2);
    CHECK(r.all.find("exactly one source") != std::string::npos);
  }
}

}  // namespace unit_log_records_cli_test
