// log_crash_test.cpp — kill -9 of a real writer process at random moments. After every kill the
// log reopens, every acknowledged offset is present with the right content, readers never read
// past the first invalid frame, and appending continues at the next offset. Prints its seed;
// TRELLARA_CRASH_SEED reproduces a run's kill schedule.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <iostream>
#include <random>
#include <sstream>

#include "log_support/log_test_support.h"
#include "trellara/log/scan.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_log_crash_test {

using namespace trellara::log;
using namespace trellara::log::testing;

namespace {

struct KilledRun {
  std::vector<uint64_t> acked;
  bool exited_before_kill = false;
};

// Starts write-test, lets it run until `acks_before_kill` acks were read or `delay_us` passed
// since the first byte of output (whichever first), then SIGKILLs it and collects every ack line
// it managed to print.
KilledRun RunAndKill(const std::string& dir, uint64_t seed, uint64_t acks_before_kill, uint64_t delay_us) {
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(pipe_fds[1], 1);
    int devnull = ::open("/dev/null", O_WRONLY);
    ::dup2(devnull, 2);
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    std::string seed_text = std::to_string(seed);
    std::vector<std::string> args = {TRELLARA_BIN, "log", "write-test", "--dir", dir, "--records", "1000000",
                                     "--record-bytes", "700", "--seed", seed_text, "--segment-bytes", "1048576",
                                     "--batch-records", "24"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(pipe_fds[1]);
  KilledRun run;
  std::string pending;
  bool killed = false;
  const auto start = std::chrono::steady_clock::now();
  auto parse = [&](bool final) {
    size_t newline;
    while ((newline = pending.find('\n')) != std::string::npos) {
      std::string line = pending.substr(0, newline);
      pending.erase(0, newline + 1);
      REQUIRE(line.rfind("acked ", 0) == 0);
      run.acked.push_back(std::stoull(line.substr(6)));
    }
    (void)final;  // an unterminated last line is not an acknowledgement: the kill interrupted it
  };
  for (;;) {
    if (!killed) {
      auto elapsed = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start);
      if (run.acked.size() >= acks_before_kill || static_cast<uint64_t>(elapsed.count()) >= delay_us) {
        ::kill(pid, SIGKILL);
        killed = true;
      }
    }
    pollfd pfd{pipe_fds[0], POLLIN, 0};
    int ready = ::poll(&pfd, 1, killed ? -1 : 1);
    if (ready <= 0) continue;
    char buf[8192];
    ssize_t n = ::read(pipe_fds[0], buf, sizeof buf);
    if (n <= 0) break;
    pending.append(buf, static_cast<size_t>(n));
    parse(false);
  }
  parse(true);
  ::close(pipe_fds[0]);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  run.exited_before_kill = !(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  return run;
}

}  // namespace

TEST_CASE("log_survives_writer_sigkill_at_random_moments", "[log][crash]") {
  uint64_t seed = static_cast<uint64_t>(::time(nullptr));
  if (const char* fixed = std::getenv("TRELLARA_CRASH_SEED")) seed = std::stoull(fixed);
  std::cout << "log crash test seed " << seed << " (TRELLARA_CRASH_SEED=" << seed << " reproduces the schedule)\n";
  INFO("crash seed " << seed);
  std::mt19937_64 random(seed);
  TempDir dir;
  const uint64_t content_seed = 4242;
  const int kills = 60;
  uint64_t acked_end = 0;  // every offset below this was acknowledged at some point
  uint64_t kills_mid_stream = 0, kills_with_torn_tail = 0;
  const auto test_start = std::chrono::steady_clock::now();
  for (int k = 0; k < kills; ++k) {
    INFO("kill " << k);
    // Kill moments: right at start-up, after a few acks, or mid-stream after many.
    uint64_t acks_before_kill = 0, delay_us = 0;
    switch (random() % 3) {
      case 0: acks_before_kill = UINT64_MAX; delay_us = random() % 3000; break;
      case 1: acks_before_kill = random() % 50; delay_us = 2000000; break;
      default: acks_before_kill = 100 + random() % 2000; delay_us = 2000000; break;
    }
    KilledRun run = RunAndKill(dir.flow(), content_seed, acks_before_kill, delay_us);
    REQUIRE_FALSE(run.exited_before_kill);
    for (size_t i = 0; i < run.acked.size(); ++i) {
      // Acks are in order and continue where the previous acknowledged log ended.
      REQUIRE(run.acked[i] == (i == 0 ? run.acked[0] : run.acked[i - 1] + 1));
    }
    if (!run.acked.empty()) {
      REQUIRE(run.acked.front() >= acked_end);
      acked_end = run.acked.back() + 1;
      kills_mid_stream += 1;
    }
    if (!std::filesystem::exists(dir.flow() + "/" + SegmentFileName(0))) {
      REQUIRE(acked_end == 0);  // killed before the first segment existed: nothing was acknowledged
      continue;
    }
    // The writer is dead: inspect (read-only) what it left, then verify through a reader.
    auto inspect = RunTrellaraJson({"log", "inspect", "--dir", dir.flow(), "--format", "json"});
    REQUIRE(inspect["corruption"].is_null());
    if (inspect["torn_tail_bytes"].get<uint64_t>() > 0) kills_with_torn_tail += 1;
    auto verify = RunTrellaraJson({"log", "verify-test", "--dir", dir.flow(), "--seed", std::to_string(content_seed),
                                   "--format", "json"});
    REQUIRE(verify["mismatches"] == 0);
    REQUIRE(verify["read_error"].is_null());
    if (acked_end > 0) {
      REQUIRE(verify["first_offset"] == 0);
      // Every acknowledged offset is readable; the reader read a gap-free run from 0.
      REQUIRE(verify["last_valid_offset"].get<uint64_t>() + 1 >= acked_end);
      REQUIRE(verify["records"].get<uint64_t>() == verify["last_valid_offset"].get<uint64_t>() + 1);
      // Nothing after the first invalid frame: the reader stopped at or before the valid chain.
      REQUIRE(verify["last_valid_offset"].get<uint64_t>() <= inspect["last_valid_offset"].get<uint64_t>());
    }
  }
  // Appending continues after the last kill, from the next offset.
  auto tail = RunTrellara({"log", "write-test", "--dir", dir.flow(), "--records", "5", "--record-bytes", "700",
                           "--seed", std::to_string(content_seed)});
  REQUIRE(tail.exit_code == 0);
  std::istringstream lines(tail.out);
  std::string word;
  uint64_t first_ack = 0;
  REQUIRE(lines >> word >> first_ack);
  CHECK(first_ack >= acked_end);
  auto final_verify = RunTrellaraJson({"log", "verify-test", "--dir", dir.flow(), "--seed",
                                       std::to_string(content_seed), "--format", "json"});
  CHECK(final_verify["mismatches"] == 0);
  CHECK(final_verify["torn_tail_bytes"] == 0);
  CHECK(final_verify["last_valid_offset"].get<uint64_t>() == first_ack + 4);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - test_start).count();
  std::cout << "log crash test: " << kills << " kills, " << kills_mid_stream << " after acks, " << kills_with_torn_tail
            << " left a torn tail, " << acked_end << " offsets acknowledged, " << seconds << " s\n";
  CHECK(kills_mid_stream >= kills / 3);  // the schedule really killed writers mid-stream
}

}  // namespace unit_log_crash_test
