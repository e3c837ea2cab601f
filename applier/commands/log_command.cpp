// log_command.cpp — `trellara log inspect|write-test|verify-test|bench|consumers|register-consumer|
// unregister-consumer`: operator and test access
// to a flow's local log directory. Adapts core/log to the command line; every decision (what is
// torn, corrupt, durable, acknowledged) is made in core. Must never modify a log except through
// LogWriter (write-test, bench), recovery (inspect --repair-index, under the writer lock) or
// core retention (unregister-consumer, under the consumer's lock).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fcntl.h>
#include <iostream>
#include <nlohmann/json.hpp>
#include <unistd.h>
#include <vector>

#include "commands/commands.h"
#include "trellara/log/consumer_offsets.h"
#include "trellara/log/inspect.h"
#include "trellara/log/reader.h"
#include "trellara/log/recovery.h"
#include "trellara/log/retention.h"
#include "trellara/log/scan.h"
#include "trellara/log/test_records.h"
#include "trellara/log/uring_device.h"
#include "trellara/log/writer.h"

namespace trellara::cli {
// Named, not anonymous: the command files compile as unity batches (CMakeLists.txt).
namespace log_command {
namespace {

using nlohmann::json;
namespace lg = trellara::log;

template <typename T>
T Unwrap(Result<T> result, int exit_code = 1) {
  if (!result.ok()) throw CommandFailed(result.error().message, exit_code);
  return std::move(result).value();
}

void Check(const Status& status, int exit_code = 1) {
  if (!status.ok()) throw CommandFailed(status.error().message, exit_code);
}

json OptionalOffset(const std::optional<uint64_t>& value) { return value ? json(*value) : json(nullptr); }

void PrintReport(const json& report, OutputFormat format) {
  if (format == OutputFormat::Json) {
    std::cout << report.dump(2) << "\n";
    return;
  }
  for (const auto& [key, value] : report.items()) {
    if (value.is_array() || value.is_object()) {
      std::cout << key << ": " << value.dump() << "\n";
    } else if (value.is_string()) {
      std::cout << key << ": " << value.get<std::string>() << "\n";
    } else {
      std::cout << key << ": " << value.dump() << "\n";
    }
  }
}

std::unique_ptr<lg::LogDevice> OpenDevice() { return Unwrap(lg::OpenUringDevice(256)); }

void RequireDirectory(lg::LogDevice& device, const std::string& dir) {
  if (!Unwrap(device.Exists(dir))) {
    throw CommandFailed("log directory " + dir + " does not exist; pass the flow's log directory with --dir", 2);
  }
}

// Holds the writer lock when no writer is running, so the log cannot change under a verification.
struct InspectionLock {
  lg::LogDevice& device;
  std::optional<lg::FileId> lock;
  InspectionLock(lg::LogDevice& d, const std::string& dir) : device(d) {
    lock = Unwrap(device.TryLockFile(lg::JoinPath(dir, lg::kLockFileName)));
  }
  ~InspectionLock() {
    if (lock) device.UnlockFile(*lock);
  }
  bool writer_active() const { return !lock.has_value(); }
};

void RegisterInspect(CLI::App* log) {
  struct Options {
    std::string dir;
    OutputFormat format = OutputFormat::Text;
    bool repair_index = false;
  };
  auto options = std::make_shared<Options>();
  auto* cmd = log->add_subcommand("inspect", "report segments, records, valid offsets, torn tail and index health");
  cmd->add_option("--dir", options->dir, "the flow's log directory")->required();
  cmd->add_flag("--repair-index", options->repair_index,
                "rebuild missing, stale or corrupt index files from durable frames (only when no writer holds the log)");
  AddFormatOption(cmd, options->format);
  cmd->callback([options] {
    auto device = OpenDevice();
    RequireDirectory(*device, options->dir);
    lg::InspectOptions inspect_options;
    inspect_options.repair_index = options->repair_index;
    auto report = Unwrap(lg::InspectLog(*device, options->dir, inspect_options), options->repair_index ? 2 : 1);
    PrintReport(json::parse(report.json), options->format);
    if (report.corrupt) throw CommandFailed(report.corruption, 3);
  });
}

// Writes one "acked <offset>" line per newly durable offset straight to fd 1 (no stdio buffer),
// so a reader of the pipe sees each acknowledgement as soon as it is made.
void PrintAcked(uint64_t& printed_end, uint64_t durable_end) {
  if (durable_end <= printed_end) return;
  std::string lines;
  for (uint64_t offset = printed_end; offset < durable_end; ++offset) {
    lines += "acked " + std::to_string(offset) + "\n";
  }
  size_t done = 0;
  while (done < lines.size()) {
    ssize_t n = ::write(1, lines.data() + done, lines.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw CommandFailed("writing acknowledgements to stdout failed", 1);
    }
    done += static_cast<size_t>(n);
  }
  printed_end = durable_end;
}

void RegisterWriteTest(CLI::App* log) {
  struct Options {
    std::string dir;
    uint64_t records = 0;
    size_t record_bytes = 1024;
    uint64_t seed = 1;
    uint64_t segment_bytes = lg::kSegmentBytesDefault;
    size_t batch_records = 16;
  };
  auto options = std::make_shared<Options>();
  auto* cmd = log->add_subcommand("write-test",
                                  "append deterministic test records, printing 'acked <offset>' as each is durable");
  cmd->add_option("--dir", options->dir, "log directory (created if absent)")->required();
  cmd->add_option("--records", options->records, "records to append")->required();
  cmd->add_option("--record-bytes", options->record_bytes, "payload bytes per record (min 20)")->default_val(1024);
  cmd->add_option("--seed", options->seed, "content seed")->required();
  cmd->add_option("--segment-bytes", options->segment_bytes, "segment size limit")->default_val(lg::kSegmentBytesDefault);
  cmd->add_option("--batch-records", options->batch_records, "records appended before waiting for completions")
      ->default_val(16);
  cmd->callback([options] {
    if (options->record_bytes < lg::kTestRecordBytesMin) {
      throw CommandFailed("--record-bytes must be at least " + std::to_string(lg::kTestRecordBytesMin), 2);
    }
    auto device = OpenDevice();
    lg::WriterOptions writer_options;
    writer_options.segment_bytes_max = options->segment_bytes;
    lg::RecoveryReport recovery;
    auto writer = Unwrap(lg::LogWriter::Open(*device, options->dir, writer_options, &recovery));
    std::fprintf(stderr, "trellara: opened %s: next offset %llu, torn tail truncated %llu bytes, index %s%s\n",
                 options->dir.c_str(), static_cast<unsigned long long>(recovery.next_offset),
                 static_cast<unsigned long long>(recovery.torn_tail_bytes), lg::IndexStatusName(recovery.index_status),
                 recovery.writer_failure_recovered
                     ? (", after an fdatasync failure: " + std::to_string(recovery.untrusted_bytes_dropped) +
                        " unacknowledged bytes dropped").c_str()
                     : "");
    uint64_t printed_end = writer->durable_end();
    uint64_t appended = 0;
    const size_t batch = std::max<size_t>(1, options->batch_records);
    while (appended < options->records) {
      for (size_t i = 0; i < batch && appended < options->records; ++i, ++appended) {
        const uint64_t offset = writer->next_offset();
        auto payload = lg::MakeTestRecord(options->seed, offset, options->record_bytes);
        Unwrap(writer->Append(static_cast<uint8_t>(lg::RecordType::Test), lg::TestRecordCommitLsn(offset), payload));
      }
      Unwrap(writer->WaitAndPoll());
      PrintAcked(printed_end, writer->durable_end());
    }
    while (writer->durable_end() < writer->next_offset()) {
      Unwrap(writer->WaitAndPoll());
      PrintAcked(printed_end, writer->durable_end());
    }
  });
}

void RegisterVerifyTest(CLI::App* log) {
  struct Options {
    std::string dir;
    uint64_t seed = 1;
    OutputFormat format = OutputFormat::Text;
  };
  auto options = std::make_shared<Options>();
  auto* cmd = log->add_subcommand("verify-test", "read every published record and compare it with the generator");
  cmd->add_option("--dir", options->dir, "log directory")->required();
  cmd->add_option("--seed", options->seed, "content seed used by write-test")->required();
  AddFormatOption(cmd, options->format);
  cmd->callback([options] {
    auto device = OpenDevice();
    RequireDirectory(*device, options->dir);
    InspectionLock lock(*device, options->dir);
    lg::ScanOptions scan_options;
    scan_options.writer_active = lock.writer_active();
    auto scan = Unwrap(lg::ScanLog(*device, options->dir, scan_options));
    auto reader = Unwrap(lg::LogReader::Open(*device, options->dir));
    uint64_t records = 0, mismatches = 0;
    std::optional<uint64_t> first, last;
    json mismatched = json::array();
    std::string read_error;
    for (;;) {
      auto next = reader->Next();
      if (!next.ok()) {
        read_error = next.error().message;
        break;
      }
      if (!next->has_value()) break;
      const lg::LogRecord& record = **next;
      if (!first) first = record.offset;
      if (last && record.offset != *last + 1) {
        read_error = "reader returned offset " + std::to_string(record.offset) + " after " + std::to_string(*last);
        break;
      }
      last = record.offset;
      records += 1;
      bool matches = record.type == static_cast<uint8_t>(lg::RecordType::Test) &&
                     record.commit_lsn == lg::TestRecordCommitLsn(record.offset) &&
                     lg::TestRecordMatches(options->seed, record.offset, record.payload);
      if (!matches) {
        mismatches += 1;
        if (mismatched.size() < 100) mismatched.push_back(record.offset);
      }
    }
    json report;
    report["dir"] = options->dir;
    report["records"] = records;
    report["first_offset"] = OptionalOffset(first);
    report["last_valid_offset"] = OptionalOffset(last);
    report["torn_tail_bytes"] = scan.torn_tail_bytes();
    report["mismatches"] = mismatches;
    report["mismatched_offsets"] = mismatched;
    report["index_status"] = lg::IndexStatusName(lg::WorseIndexStatus(scan.index_status(), reader->index_status()));
    report["writer_active"] = lock.writer_active();
    auto corruption = scan.corruption();
    report["corruption"] = corruption ? json(*corruption) : json(nullptr);
    report["read_error"] = read_error.empty() ? json(nullptr) : json(read_error);
    PrintReport(report, options->format);
    if (mismatches > 0) throw CommandFailed(std::to_string(mismatches) + " records differ from the generator", 1);
    if (!read_error.empty()) throw CommandFailed(read_error, 3);
  });
}

double Percentile(std::vector<double>& values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  size_t index = static_cast<size_t>(p * static_cast<double>(values.size() - 1) + 0.5);
  return values[std::min(index, values.size() - 1)];
}

void RegisterBench(CLI::App* log) {
  struct Options {
    std::string dir;
    uint64_t records = 100000;
    size_t record_bytes = 1024;
    bool sync_every_record = false;
    bool sequential_baseline = false;
    size_t window_records = 8192;
    size_t batch_bytes = 128u << 10;
    uint64_t segment_bytes = lg::kSegmentBytesDefault;
    OutputFormat format = OutputFormat::Text;
  };
  auto options = std::make_shared<Options>();
  auto* cmd = log->add_subcommand("bench", "measure append throughput and acknowledgement latency");
  cmd->add_option("--dir", options->dir, "an empty or absent directory to write into")->required();
  cmd->add_option("--records", options->records, "records to append")->default_val(100000);
  cmd->add_option("--record-bytes", options->record_bytes, "payload bytes per record")->default_val(1024);
  cmd->add_flag("--sync-every-record", options->sync_every_record, "append, fdatasync and acknowledge one record at a time");
  cmd->add_flag("--sequential-baseline", options->sequential_baseline,
                "baseline: write the same frames sequentially with pwrite and one fdatasync at the end");
  cmd->add_option("--window-records", options->window_records, "group commit: most unacknowledged records")
      ->default_val(8192);
  cmd->add_option("--batch-bytes", options->batch_bytes, "group commit: bytes per submitted write")->default_val(128u << 10);
  cmd->add_option("--segment-bytes", options->segment_bytes, "segment size limit")->default_val(lg::kSegmentBytesDefault);
  AddFormatOption(cmd, options->format);
  cmd->callback([options] {
    if (options->sync_every_record && options->sequential_baseline) {
      throw CommandFailed("--sync-every-record and --sequential-baseline are different runs; pass one", 2);
    }
    auto device = OpenDevice();
    Check(device->MakeDirectory(options->dir));
    if (!Unwrap(device->ListDirectory(options->dir)).empty()) {
      throw CommandFailed("bench directory " + options->dir + " is not empty; give a fresh directory", 2);
    }
    using Clock = std::chrono::steady_clock;
    const uint64_t frame_bytes = lg::kFrameHeaderBytes + options->record_bytes;
    std::vector<uint8_t> payload = lg::MakeTestRecord(7, 0, options->record_bytes);
    std::vector<double> latencies_us;
    uint64_t fsyncs = 0;
    std::string mode;
    // Both modes time the same span: from an open, empty file (baseline) or an open, empty log
    // (LogWriter::Open has run: lock, recovery, first segment) to the point where every frame is
    // durable — the baseline's fdatasync returned, or the writer acknowledged the last record.
    // Opening and closing (the writer's destructor syncs the index and frees its buffers) are set-up
    // and tear-down in both, not append throughput.
    Clock::time_point start, stop;
    if (options->sequential_baseline) {
      mode = "sequential-baseline";
      const std::string path = lg::JoinPath(options->dir, "baseline.dat");
      int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      if (fd < 0) throw CommandFailed("open " + path + " failed", 1);
      start = Clock::now();
      std::vector<uint8_t> chunk;
      uint64_t position = 0;
      for (uint64_t offset = 0; offset < options->records; ++offset) {
        size_t at = chunk.size();
        chunk.resize(at + frame_bytes);
        lg::EncodeFrame(static_cast<uint8_t>(lg::RecordType::Test), offset, 0, offset, payload, chunk.data() + at);
        if (chunk.size() >= options->batch_bytes || offset + 1 == options->records) {
          if (::pwrite(fd, chunk.data(), chunk.size(), static_cast<off_t>(position)) != static_cast<ssize_t>(chunk.size())) {
            ::close(fd);
            throw CommandFailed("pwrite to " + path + " failed", 1);
          }
          position += chunk.size();
          chunk.clear();
        }
      }
      if (::fdatasync(fd) != 0) throw CommandFailed("fdatasync of " + path + " failed", 1);
      stop = Clock::now();
      ::close(fd);
      fsyncs = 1;
    } else {
      lg::WriterOptions writer_options;
      writer_options.batch_bytes_max = options->sync_every_record ? 1 : options->batch_bytes;
      writer_options.segment_bytes_max = options->segment_bytes;
      auto writer = Unwrap(lg::LogWriter::Open(*device, options->dir, writer_options));
      std::vector<Clock::time_point> appended_at;
      // The latency bookkeeping (which the baseline does not do) is faulted in before the clock
      // starts, so its first-touch page faults are not counted as append time.
      appended_at.assign(options->records, Clock::time_point{});
      latencies_us.assign(options->records, 0.0);
      start = Clock::now();
      uint64_t acked = writer->durable_end();
      const uint64_t base = acked;
      auto record_acks = [&](uint64_t durable_end) {
        const auto now = Clock::now();
        for (; acked < durable_end; ++acked) {
          latencies_us[acked - base] = std::chrono::duration<double, std::micro>(now - appended_at[acked - base]).count();
        }
      };
      if (options->sync_every_record) {
        mode = "sync-every-record";
        for (uint64_t i = 0; i < options->records; ++i) {
          appended_at[i] = Clock::now();
          Unwrap(writer->Append(static_cast<uint8_t>(lg::RecordType::Test), i, payload));
          record_acks(Unwrap(writer->Flush()));
        }
      } else {
        mode = "group-commit";
        uint64_t appended = 0;
        // A producer that keeps appending while the disk works: it reaps completions (and so
        // starts the next group's fdatasync) every 64 records, and waits only when the window of
        // unacknowledged records is full.
        while (acked - base < options->records) {
          size_t burst = 0;
          while (appended < options->records && appended - (acked - base) < options->window_records && burst < 64) {
            appended_at[appended] = Clock::now();
            Unwrap(writer->Append(static_cast<uint8_t>(lg::RecordType::Test), appended, payload));
            appended += 1;
            burst += 1;
          }
          if (burst > 0) {
            record_acks(Unwrap(writer->Poll()));
          } else {
            record_acks(Unwrap(writer->WaitAndPoll()));
          }
        }
      }
      stop = Clock::now();  // the last record is acknowledged
      fsyncs = writer->fsyncs_completed();
    }
    const double seconds = std::chrono::duration<double>(stop - start).count();
    json report;
    report["mode"] = mode;
    report["records"] = options->records;
    report["record_bytes"] = options->record_bytes;
    report["seconds"] = seconds;
    report["records_per_s"] = static_cast<double>(options->records) / seconds;
    report["mb_per_s"] = static_cast<double>(options->records * frame_bytes) / seconds / 1e6;
    report["fsyncs"] = fsyncs;
    report["p50_ack_us"] = options->sequential_baseline ? json(nullptr) : json(Percentile(latencies_us, 0.50));
    report["p99_ack_us"] = options->sequential_baseline ? json(nullptr) : json(Percentile(latencies_us, 0.99));
    PrintReport(report, options->format);
  });
}

// --dir D or --config F (the flow's log_directory): consumers and unregister-consumer.
struct LogDirOption {
  std::string dir;
  std::string config;
  void Add(CLI::App* cmd) {
    auto* dir_option = cmd->add_option("--dir", dir, "the flow's log directory");
    auto* config_option = cmd->add_option("--config", config, "the flow's TOML configuration file (its log_directory)");
    dir_option->excludes(config_option);
  }
  std::string Resolve() const {
    if (!dir.empty()) return dir;
    if (!config.empty()) return LoadConfigOrFail(config).log_directory;
    throw CommandFailed("pass the flow's log directory with --dir D, or its configuration with --config F", 2);
  }
};

void RegisterConsumers(CLI::App* log) {
  struct Options {
    LogDirOption where;
    OutputFormat format = OutputFormat::Text;
  };
  auto options = std::make_shared<Options>();
  auto* cmd = log->add_subcommand(
      "consumers", "list the registered consumers of a log: offset, lag, bytes retained, running, lost");
  options->where.Add(cmd);
  AddFormatOption(cmd, options->format);
  cmd->callback([options] {
    const std::string dir = options->where.Resolve();
    auto device = OpenDevice();
    RequireDirectory(*device, dir);
    auto status = Unwrap(lg::DescribeRetention(*device, dir));
    if (options->format == OutputFormat::Json) {
      std::cout << json::parse(lg::RetentionStatusJson(status)).dump(2) << "\n";
      return;
    }
    std::printf("log %s: %llu segments, %llu bytes, offsets %llu..%llu\n", dir.c_str(),
                static_cast<unsigned long long>(status.segments), static_cast<unsigned long long>(status.log_bytes),
                static_cast<unsigned long long>(status.first_offset), static_cast<unsigned long long>(status.end_offset));
    if (status.consumers.empty()) {
      std::printf("no consumer registered: nothing is deleted until one registers (trellara apply registers "
                  "consumer \"applier\" on its first start)\n");
      return;
    }
    std::printf("%-24s %14s %12s %16s %-8s %s\n", "consumer", "next_offset", "lag_records", "retained_bytes", "running",
                "state");
    for (const auto& c : status.consumers) {
      std::printf("%-24s %14llu %12llu %16llu %-8s %s\n", c.name.c_str(),
                  static_cast<unsigned long long>(c.state.next_offset), static_cast<unsigned long long>(c.lag_records),
                  static_cast<unsigned long long>(c.retained_bytes), c.active ? "yes" : "no",
                  c.state.lost ? "LOST (reseed, then unregister-consumer)" : "ok");
    }
    if (!status.held_by.empty())
      std::printf("retention held by: %s (%llu bytes)\n", status.held_by.c_str(),
                  static_cast<unsigned long long>(status.held_bytes));
  });
}

void RegisterUnregisterConsumer(CLI::App* log) {
  struct Options {
    LogDirOption where;
    std::string name;
  };
  auto options = std::make_shared<Options>();
  auto* cmd = log->add_subcommand(
      "unregister-consumer",
      "remove a consumer so it no longer retains the log (refused while its applier runs)");
  cmd->add_option("name", options->name, "the consumer's name (trellara apply registers \"applier\")")->required();
  options->where.Add(cmd);
  cmd->callback([options] {
    const std::string dir = options->where.Resolve();
    auto device = OpenDevice();
    RequireDirectory(*device, dir);
    const bool existed = Unwrap(lg::UnregisterConsumer(*device, dir, options->name));
    if (!existed)
      throw CommandFailed("log " + dir + " has no consumer named " + options->name +
                              "; list them with trellara log consumers --dir " + dir,
                          1);
    std::printf("unregistered consumer %s of %s; the relay deletes what it retained within seconds\n",
                options->name.c_str(), dir.c_str());
  });
}

void RegisterRegisterConsumer(CLI::App* log) {
  struct Options {
    LogDirOption where;
    std::string name;
  };
  auto options = std::make_shared<Options>();
  auto* cmd = log->add_subcommand(
      "register-consumer",
      "register a reader of the log (other than trellara apply, which registers itself) so the relay retains "
      "what it has not read; it starts at the log's first offset");
  cmd->add_option("name", options->name, "the consumer's name: 1-64 of [A-Za-z0-9_.-]")->required();
  options->where.Add(cmd);
  cmd->callback([options] {
    const std::string dir = options->where.Resolve();
    auto device = OpenDevice();
    RequireDirectory(*device, dir);
    Check(lg::RegisterConsumer(*device, dir, options->name));
    const auto offsets = Unwrap(lg::ReadConsumerOffsets(*device, dir));
    std::printf("consumer %s of %s is registered at offset %llu\n", options->name.c_str(), dir.c_str(),
                static_cast<unsigned long long>(offsets.at(options->name)));
  });
}

}  // namespace
}  // namespace log_command

void RegisterLogCommands(CLI::App& app) {
  using namespace log_command;
  auto* log = app.add_subcommand("log", "inspect and exercise a flow's local log directory");
  log->require_subcommand(1);
  RegisterInspect(log);
  RegisterWriteTest(log);
  RegisterVerifyTest(log);
  RegisterBench(log);
  RegisterConsumers(log);
  RegisterRegisterConsumer(log);
  RegisterUnregisterConsumer(log);
}

}  // namespace trellara::cli
