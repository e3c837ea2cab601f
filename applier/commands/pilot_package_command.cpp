// pilot_package_command.cpp — `trellara pilot-package --config F --output DIR [--report PATH]
// [--sample-offset N] [--force]`: writes the proof bundle a DBA hands to a reviewer
// (docs/pilot-package.md).
//
// Each sub-step is this same binary (/proc/self/exe) run as a child process through posix_spawn
// with an argument vector (no shell), its stdout captured into the bundle, its stderr tail and
// exit code recorded in manifest.json. The snapshot summary is read from the target's
// trellara.snapshot_status(); the correctness report is copied. What each outcome means, the
// verdict, the exit code and the manifest / SHA256SUMS / proof-bundle.md renderings are core's
// (core/include/trellara/report/pilot_package.h). A failing or missing artefact is recorded, never
// hidden: the bundle is written and the command exits 1.
#include <CLI/CLI.hpp>

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "commands/commands.h"
#include "commands/log_record_view.h"
#include "trellara/log/consumer_offsets.h"
#include "trellara/log/format.h"
#include "trellara/report/pilot_package.h"

extern char** environ;

namespace trellara::cli {
// Named, not anonymous: the command files compile as unity batches (CMakeLists.txt).
namespace pilot_package_command {
namespace {

namespace fs = std::filesystem;
using pilot::Artefact;
using pilot::ArtefactResult;

constexpr size_t kStderrTailBytes = 4000;

struct Options {
  std::string config_path;
  std::string output_dir;
  std::string report_path = "docs/correctness-report.html";
  std::optional<uint64_t> sample_offset;
  bool force = false;
};

struct ChildResult {
  int exit_code = -1;
  std::string out, err;
};

std::string SelfExe() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  if (ec) throw CommandFailed("cannot resolve /proc/self/exe to run the sub-steps: " + ec.message());
  return p.string();
}

// Runs argv[0] with argv (no shell), capturing stdout and stderr; the exit code, or 128+signal.
ChildResult RunChild(const std::vector<std::string>& argv) {
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) throw CommandFailed(std::string("pipe for a sub-step: ") + std::strerror(errno));
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    close(out_pipe[0]);
    close(out_pipe[1]);
    throw CommandFailed(std::string("pipe for a sub-step: ") + std::strerror(errno));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], STDERR_FILENO);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (rc != 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    throw CommandFailed("cannot start `" + pilot::QuoteCommand(argv) + "`: " + std::strerror(rc));
  }
  ChildResult result;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_fds = 2;
  char buf[65536];
  while (open_fds > 0) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; i++) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      const ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        sinks[i]->append(buf, static_cast<size_t>(n));
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        close(fds[i].fd);
        fds[i].fd = -1;
        open_fds--;
      }
    }
  }
  for (auto& f : fds)
    if (f.fd >= 0) close(f.fd);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw CommandFailed(std::string("waiting for a sub-step: ") + std::strerror(errno));
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

std::string Tail(const std::string& s) {
  return s.size() <= kStderrTailBytes ? s : "..." + s.substr(s.size() - kStderrTailBytes);
}

void WriteFile(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw CommandFailed("cannot create " + path.string() + ": " + std::strerror(errno));
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.flush();
  if (!out) throw CommandFailed("cannot write " + path.string() + ": " + std::strerror(errno));
}

// Writes `bytes` as the artefact's file and records its digest and size.
void Store(const fs::path& dir, Artefact& a, const std::string& bytes) {
  WriteFile(dir / a.file, bytes);
  a.present = true;
  a.bytes = bytes.size();
  a.sha256_hex = pilot::Sha256Hex(bytes);
}

// Runs one sub-step and stores its stdout as the artefact's file.
ChildResult RunStep(const fs::path& dir, Artefact& a, const std::vector<std::string>& argv) {
  a.command = pilot::QuoteCommand(argv);
  ChildResult r = RunChild(argv);
  a.exit_code = r.exit_code;
  a.stderr_tail = Tail(r.err);
  Store(dir, a, r.out);
  return r;
}

// The offset of the newest transaction record the applier has applied: the last envelope or
// commit marker before the applier's consumer offset. nullopt when nothing was applied yet.
std::optional<uint64_t> NewestAppliedOffset(const FlowConfig& config, std::string& why_none) {
  auto device = OpenLogDeviceForReading();
  auto offsets = log::ReadConsumerOffsets(*device, config.log_directory);
  if (!offsets)
    throw CommandFailed("cannot read the consumer offsets of the log of flow " + config.flow_name + " at " +
                        config.log_directory + ": " + offsets.error().message);
  auto it = offsets->find(log::kApplierConsumer);
  if (it == offsets->end()) {
    why_none = "the applier has not applied anything from " + config.log_directory +
               " yet (no consumer offset); run `trellara apply --config " + config.path + "` first";
    return std::nullopt;
  }
  const uint64_t consumer = it->second;
  auto reader = OpenLogForReading(*device, config.log_directory);
  std::optional<uint64_t> newest;
  while (reader->next_offset() < consumer) {
    auto next = reader->Next();
    if (!next)
      throw CommandFailed("reading the log of flow " + config.flow_name + " at " + config.log_directory +
                          " at offset " + std::to_string(reader->next_offset()) + " failed: " +
                          next.error().message + "; run `trellara log inspect --dir " + config.log_directory + "`");
    if (!*next) break;
    const log::LogRecord& record = **next;
    if (record.offset >= consumer) break;
    if (EndsTransaction(record.type)) newest = record.offset;
  }
  if (!newest)
    why_none = "no applied transaction record remains in " + config.log_directory + " before the consumer offset " +
               std::to_string(consumer) + "; give one with --sample-offset N";
  return newest;
}

// The flow's rows of trellara.snapshot_status() on the target, as snapshot.json. Read in this
// process (a query, not a child process): its manifest exit_code is null.
void SnapshotSummary(const FlowConfig& config, const fs::path& dir, Artefact& a) {
  const std::string sql =
      "SELECT table_name, run_id, state, key_column, row_filter, chunks, chunks_copied, rows_copied, bytes_copied, "
      "seconds, skipped_transactions, last_error, updated_at FROM trellara.snapshot_status() WHERE flow = $1 "
      "ORDER BY table_name";
  a.command = "on the target (" + PgConnection::DescribeConninfo(config.target_conninfo) + "): " +
              sql + "  -- $1 = " + config.flow_name;
  std::vector<pilot::SnapshotTable> tables;
  nlohmann::ordered_json j;
  try {
    auto target = ConnectPinned(config, config.target_conninfo, "target", "trellara pilot-package");
    auto exists = MustSucceed(*target, target->Exec("SELECT to_regprocedure('trellara.snapshot_status()') IS NOT NULL"),
                              "looking up trellara.snapshot_status()");
    if (exists.Value(0, 0) != std::optional<std::string>("t"))
      throw CommandFailed("the target has no trellara.snapshot_status(): its trellara schema was not bootstrapped by "
                          "this build; run `trellara apply --config " + config.path + "` once");
    auto r = MustSucceed(*target, target->ExecParams(sql, {config.flow_name}),
                         "reading trellara.snapshot_status() of flow " + config.flow_name);
    j["flow"] = config.flow_name;
    j["tables"] = nlohmann::ordered_json::array();
    auto text = [&](int row, int col) {
      auto v = r.Value(row, col);
      return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json();
    };
    auto integer = [&](int row, int col) {
      auto v = r.Value(row, col);
      return v ? nlohmann::ordered_json(std::stoll(*v)) : nlohmann::ordered_json();
    };
    for (int i = 0; i < r.rows(); i++) {
      tables.push_back({r.Value(i, 0).value_or(""), r.Value(i, 1).value_or(""), r.Value(i, 2).value_or("")});
      auto seconds = r.Value(i, 9);
      j["tables"].push_back({{"table", text(i, 0)},
                             {"run_id", text(i, 1)},
                             {"state", text(i, 2)},
                             {"key_column", text(i, 3)},
                             {"row_filter", text(i, 4)},
                             {"chunks", integer(i, 5)},
                             {"chunks_copied", integer(i, 6)},
                             {"rows_copied", integer(i, 7)},
                             {"bytes_copied", integer(i, 8)},
                             {"seconds", seconds ? nlohmann::ordered_json(std::stod(*seconds)) : nlohmann::ordered_json()},
                             {"skipped_transactions", integer(i, 10)},
                             {"last_error", text(i, 11)},
                             {"updated_at", text(i, 12)}});
    }
  } catch (const CommandFailed& e) {
    a.result = ArtefactResult::Fail;
    a.detail = std::string("could not read the snapshot state: ") + e.what();
    return;
  }
  a.result = pilot::ClassifySnapshot(tables, a.detail);
  j["verdict"] = pilot::ArtefactResultName(a.result);
  j["detail"] = a.detail;
  Store(dir, a, j.dump(2) + "\n");
}

void PrepareOutputDir(const Options& opt, const fs::path& dir, const std::vector<std::string>& our_files) {
  std::error_code ec;
  if (fs::exists(dir, ec)) {
    if (!fs::is_directory(dir, ec))
      throw CommandFailed("--output " + dir.string() + " exists and is not a directory; name a new directory",
                          kExitUsage);
    if (!fs::is_empty(dir, ec)) {
      if (!opt.force)
        throw CommandFailed("refusing to write the bundle into " + dir.string() +
                                ": the directory is not empty; name a new or empty directory, or pass --force to "
                                "replace the bundle files in it",
                            kExitUsage);
      // --force: our own files are replaced; a stale file from an earlier bundle must not survive.
      for (const std::string& f : our_files) {
        fs::remove(dir / f, ec);
        if (ec) throw CommandFailed("--force: cannot remove " + (dir / f).string() + ": " + ec.message(), kExitUsage);
      }
    }
    return;
  }
  fs::create_directories(dir, ec);
  if (ec) throw CommandFailed("cannot create --output " + dir.string() + ": " + ec.message(), kExitUsage);
}

Artefact Make(const char* name, const char* file, const char* proves) {
  Artefact a;
  a.name = name;
  a.file = file;
  a.proves = proves;
  return a;
}

void Run(const Options& opt) {
  FlowConfig config = LoadConfigOrFail(opt.config_path);
  const std::string config_abs = fs::absolute(opt.config_path).lexically_normal().string();
  const fs::path dir = fs::absolute(opt.output_dir).lexically_normal();
  const std::string exe = SelfExe();

  Artefact check = Make("check", "check.json",
                        "the preflight of the flow (`trellara check`): source safety settings and the rows of "
                        "trellara.check(flow), and that apply can run on the target");
  Artefact sample_text = Make("sample_transaction_text", "sample-transaction.txt",
                              "one captured transaction as the log holds it, readable: its commit LSN, changes and "
                              "the status of its SHA-256 checksum");
  Artefact sample_json = Make("sample_transaction_json", "sample-transaction.json",
                              "the same transaction in machine-readable form");
  Artefact snapshot = Make("snapshot", "snapshot.json",
                           "the per-table state of the initial copy (`trellara snapshot`) recorded on the target");
  Artefact verify = Make("verify", "verify.json",
                         "source and target compared at one exact point while both are live (`trellara verify`)");
  Artefact status = Make("status", "status.json",
                         "the flow's state, lag, quarantine and next action at packaging time (`trellara status`)");
  Artefact report = Make("correctness_report", "correctness-report.html",
                         "the correctness report: which seed-000 rows the scenario and chaos tests proved, with "
                         "their paired negative controls (`trellara chaos report`)");

  PrepareOutputDir(opt, dir,
                   {check.file, sample_text.file, sample_json.file, snapshot.file, verify.file, status.file,
                    report.file, "manifest.json", "SHA256SUMS", "proof-bundle.md"});

  // check
  {
    ChildResult r = RunStep(dir, check, {exe, "check", "--config", config_abs, "--format", "json"});
    check.result = pilot::ClassifyCheck(r.exit_code, check.detail);
  }
  // status (before verify: verify briefly holds the applier)
  {
    ChildResult r = RunStep(dir, status, {exe, "status", "--config", config_abs, "--format", "json"});
    std::optional<std::string> state;
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.contains("state") && j["state"].is_string())
      state = j["state"].get<std::string>();
    status.result = pilot::ClassifyStatus(r.exit_code, state, status.detail);
  }
  // the sample transaction
  {
    std::string why_none;
    std::optional<uint64_t> offset = opt.sample_offset;
    if (!offset) {
      try {
        offset = NewestAppliedOffset(config, why_none);
      } catch (const CommandFailed& e) {
        why_none = e.what();
      }
    }
    if (offset) {
      for (auto [a, format] : {std::pair{&sample_text, "text"}, std::pair{&sample_json, "json"}}) {
        ChildResult r = RunStep(dir, *a, {exe, "inspect-transaction", "--dir", config.log_directory, "--offset",
                                          std::to_string(*offset), "--format", format});
        a->result = pilot::ClassifyInspect(r.exit_code, a->detail);
        if (a->ok())
          a->detail = std::string("log offset ") + std::to_string(*offset) +
                      (opt.sample_offset ? " (--sample-offset)" : " (the newest applied transaction record)") + ": " +
                      a->detail;
      }
    } else {
      for (Artefact* a : {&sample_text, &sample_json}) {
        a->command = "trellara inspect-transaction --dir " + config.log_directory + " --offset N (not run)";
        a->result = ArtefactResult::Missing;
        a->detail = "no transaction to sample: " + why_none;
      }
    }
  }
  SnapshotSummary(config, dir, snapshot);
  // verify (exit 1 mismatch, 2 could not verify: recorded, not hidden)
  {
    ChildResult r = RunStep(dir, verify, {exe, "verify", "--config", config_abs, "--format", "json"});
    verify.result = pilot::ClassifyVerify(r.exit_code, verify.detail);
  }
  // the correctness report
  {
    const fs::path src = fs::absolute(opt.report_path).lexically_normal();
    report.command = "copy of " + src.string();
    std::ifstream in(src, std::ios::binary);
    if (!in) {
      report.result = ArtefactResult::Missing;
      report.detail = "no correctness report at " + src.string() + " (" + std::strerror(errno) +
                      "); generate it with `build/bin/trellara chaos report --output docs/correctness-report.html` "
                      "(or pass --report PATH) and package again";
    } else {
      std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (in.bad()) throw CommandFailed("cannot read the correctness report " + src.string() + ": " + std::strerror(errno));
      Store(dir, report, bytes);
      report.result = ArtefactResult::Pass;
      report.detail = "copied from " + src.string();
    }
  }

  pilot::Bundle bundle;
  bundle.tool_version = TRELLARA_VERSION;
  bundle.flow = config.flow_name;
  bundle.created_at = pilot::FormatUtc(std::time(nullptr));
  bundle.config_path = config_abs;
  bundle.artefacts = {check, sample_text, sample_json, snapshot, verify, status, report};

  const std::string manifest = pilot::RenderManifestJson(bundle);
  const std::string markdown = pilot::RenderProofBundleMarkdown(bundle);
  WriteFile(dir / "manifest.json", manifest);
  WriteFile(dir / "proof-bundle.md", markdown);
  WriteFile(dir / "SHA256SUMS", pilot::RenderSha256Sums(bundle, {{"manifest.json", manifest}, {"proof-bundle.md", markdown}}));

  std::cout << "proof bundle of flow " << bundle.flow << " written to " << dir.string() << "\n";
  for (const Artefact& a : bundle.artefacts)
    std::cout << "  " << pilot::ArtefactResultName(a.result) << "\t" << a.file << ": " << a.detail << "\n";
  std::cout << "verdict: " << (pilot::AllOk(bundle) ? "pass" : "fail") << "\n";
  std::cout.flush();

  if (pilot::ExitCode(bundle) != kExitBundleOk) {
    std::string failed;
    for (const Artefact& a : bundle.artefacts)
      if (!a.ok()) failed += (failed.empty() ? "" : ", ") + a.file + " " + pilot::ArtefactResultName(a.result);
    std::string message = "the proof bundle in " + dir.string() + " records failures (" + failed +
                          "); see proof-bundle.md there";
    if (report.result == ArtefactResult::Missing)
      message += "; the correctness report is missing: generate it with "
                 "`build/bin/trellara chaos report --output docs/correctness-report.html` or pass --report PATH";
    throw CommandFailed(message, pilot::ExitCode(bundle));
  }
}

}  // namespace
}  // namespace pilot_package_command

void RegisterPilotPackage(CLI::App& app) {
  using namespace pilot_package_command;
  auto* cmd = app.add_subcommand("pilot-package",
                                 "write the proof bundle of one flow for a reviewer (--config F --output DIR); exit 0 "
                                 "every artefact passed, 1 any failed or missing, 2 usage");
  auto opt = std::make_shared<Options>();
  AddConfigOption(cmd, opt->config_path);
  cmd->add_option("--output", opt->output_dir, "the bundle directory (created; must be new or empty)")->required();
  cmd->add_option("--report", opt->report_path,
                  "the correctness report to include (default docs/correctness-report.html)");
  cmd->add_option("--sample-offset", opt->sample_offset,
                  "log offset of the transaction to include (default: the newest applied one)");
  cmd->add_flag("--force", opt->force, "write into a non-empty --output, replacing the bundle's files");
  cmd->callback([opt] { Run(*opt); });
}

}  // namespace trellara::cli
