// log_test_support.h — helpers shared by the log tests: throwaway directories, running the
// `trellara` command and parsing its JSON, writing test records. Never hides a failure: every
// helper REQUIREs what it depends on.
#pragma once

#include <fcntl.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "trellara/log/format.h"
#include "trellara/log/test_records.h"
#include "trellara/log/uring_device.h"
#include "trellara/log/writer.h"

namespace trellara::log::testing {

// A fresh directory under $TMPDIR (or /var/tmp: a real disk, so fdatasync means something),
// removed when the test ends.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base != nullptr ? base : "/var/tmp") + "/trellara-log-test-XXXXXX";
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    REQUIRE(::mkdtemp(buf.data()) != nullptr);
    path_ = buf.data();
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }
  std::string flow() const { return path_ + "/flow"; }

 private:
  std::string path_;
};

inline std::unique_ptr<LogDevice> RealDevice() {
  auto device = OpenUringDevice(64);
  REQUIRE(device.ok());
  return std::move(device).value();
}

// Appends `count` deterministic test records (content from `seed`), flushing every `flush_every`.
inline void AppendTestRecords(LogWriter& writer, uint64_t seed, uint64_t count, size_t bytes, uint64_t flush_every) {
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t offset = writer.next_offset();
    auto appended = writer.Append(static_cast<uint8_t>(RecordType::Test), TestRecordCommitLsn(offset),
                                  MakeTestRecord(seed, offset, bytes));
    REQUIRE(appended.ok());
    REQUIRE(*appended == offset);
    if ((i + 1) % flush_every == 0 || i + 1 == count) {
      auto flushed = writer.Flush();
      INFO((flushed.ok() ? std::string() : flushed.error().message));
      REQUIRE(flushed.ok());
    }
  }
}

struct CommandOutput {
  int exit_code = -1;
  std::string out;
};

// Runs the trellara command with `args` (no shell), capturing stdout; stderr passes through.
inline CommandOutput RunTrellara(const std::vector<std::string>& args) {
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(pipe_fds[1], 1);
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    std::vector<char*> argv;
    std::string bin = TRELLARA_BIN;
    argv.push_back(bin.data());
    std::vector<std::string> copy = args;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(bin.c_str(), argv.data());
    ::_exit(127);
  }
  ::close(pipe_fds[1]);
  CommandOutput output;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(pipe_fds[0], buf, sizeof buf)) > 0) output.out.append(buf, static_cast<size_t>(n));
  ::close(pipe_fds[0]);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  output.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return output;
}

inline nlohmann::json RunTrellaraJson(const std::vector<std::string>& args, int expected_exit = 0) {
  CommandOutput output = RunTrellara(args);
  INFO("trellara output: " << output.out);
  REQUIRE(output.exit_code == expected_exit);
  auto parsed = nlohmann::json::parse(output.out, nullptr, false);
  REQUIRE(!parsed.is_discarded());
  return parsed;
}

inline std::vector<uint8_t> ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void WriteFileBytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  REQUIRE(out.good());
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

}  // namespace trellara::log::testing
