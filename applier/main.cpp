// main.cpp — entry point of the `trellara` command: parses arguments, dispatches to a command,
// and turns failures into a message on stderr and a non-zero exit code. Never decides anything
// about data; commands call core for that.
#include <CLI/CLI.hpp>
#include <malloc.h>

#include <array>
#include <cstdio>
#include <iostream>
#include <map>

#include "broker/nats_stream.h"
#include "commands/commands.h"
#include "trellara/base/fault.h"


namespace {

// Commands planned by DESIGN.md section 7 that later issues deliver; listed in --help so an
// operator sees the whole surface, and refused with a clear message until they exist.
struct Planned {
  const char* name;
  const char* summary;
};
constexpr std::array<Planned, 0> kPlanned{};  // none at the moment

// At exit, one stderr line per fault point that fired: `trellara: fault point P fired N times`
// (tests/integration/capture_support.py reads it; a crash action reports itself before dying).
// Nothing is printed when no fault fired, so runs without TRELLARA_FAULTS are unchanged.
void ReportFiredFaults() {
  for (const auto& [point, count] : trellara::fault::FiredCounts()) {
    std::fprintf(stderr, "trellara: fault point %s fired %d times\n", point.c_str(), count);
  }
  std::fflush(stderr);
}

struct FiredFaultsAtExit {
  ~FiredFaultsAtExit() { ReportFiredFaults(); }
};

// glibc's heap settings for a long-running applier: a batch allocates and frees the same few
// hundred KiB (merged statements, their parameters, decoded envelopes) over and over; with the
// defaults glibc gives the top of the heap back to the kernel after each batch and moves large
// blocks to mmap, so the next batch page-faults the same memory in again. Keeping up to 32 MiB
// of freed heap, growing it 8 MiB at a time and leaving blocks under 8 MiB on the heap cut the
// applier's CPU per transaction (docs/performance.md, "Log reading and the heap", 2026-12-07). At
// most that much memory stays with the process after a peak; larger blocks still go back at once.
void TuneHeap() {
  mallopt(M_MMAP_THRESHOLD, 8 << 20);
  mallopt(M_TRIM_THRESHOLD, 32 << 20);
  mallopt(M_TOP_PAD, 8 << 20);
}

}  // namespace

int main(int argc, char** argv) {
  TuneHeap();
  CLI::App app{"trellara — change data capture for PostgreSQL with proof.\n"
               "Captures committed transactions into a durable local log and applies each one to "
               "the target exactly once."};
  app.name("trellara");
  app.set_version_flag("--version", std::string("trellara ") + TRELLARA_VERSION);
  app.require_subcommand(1);
  // Hidden, test-only: permits `defect.*` fault points (deliberately wrong code paths for the
  // negative-control tests). Without it a TRELLARA_FAULTS naming a defect stops the command
  // before it does anything (docs/decisions.md). A global option: it goes before the subcommand.
  bool enable_test_defects = false;
  app.add_flag("--enable-test-defects", enable_test_defects)->group("");
  app.parse_complete_callback([&enable_test_defects] {
    trellara::fault::AllowDefects(enable_test_defects, "the command-line flag --enable-test-defects");
    trellara::Status faults = trellara::fault::LoadFromEnvironment();
    if (!faults.ok()) throw trellara::cli::CommandFailed(faults.error().message, 2);
  });

  trellara::cli::RegisterApply(app);
  trellara::cli::RegisterStatus(app);
  trellara::cli::RegisterQuarantine(app);
  trellara::cli::RegisterVerify(app);
  trellara::cli::RegisterSnapshot(app);
  trellara::cli::RegisterReseed(app);
  trellara::cli::RegisterChaos(app);
  trellara::cli::RegisterContractTest(app);
  trellara::cli::RegisterRepairPlan(app);
  trellara::cli::RegisterSoak(app);
  trellara::cli::RegisterInspectTransaction(app);
  trellara::cli::RegisterLogCommands(app);
  trellara::cli::RegisterLogRecords(app);
  trellara::cli::RegisterCheck(app);
  trellara::cli::RegisterPilotPackage(app);
  trellara::cli::RegisterForward(app);
  trellara::cli::RegisterPartitionWatermarks(app);
  trellara::cli::RegisterRun(app);
  trellara::cli::RegisterLake(app);
  for (const auto& planned : kPlanned) {
    auto existing = app.get_subcommands([&](CLI::App* c) { return c->get_name() == planned.name; });
    if (!existing.empty()) continue;
    auto* cmd = app.add_subcommand(planned.name, std::string(planned.summary) + " [not yet available]");
    cmd->allow_extras();
    cmd->callback([name = planned.name] {
      throw trellara::cli::CommandFailed(std::string("command '") + name +
                                             "' is planned but not available in this version; "
                                             "see 'trellara --help' for the commands that are",
                                         2);
    });
  }

  // Last out (declared first): the broker client's threads stop after every command object is gone.
  struct CloseBrokerClient {
    ~CloseBrokerClient() { trellara::cli::broker::CloseClientLibrary(); }
  } close_broker_client;
  const FiredFaultsAtExit report_fired_faults;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    // `check` documents exit 1 for a usage error (2 is its "critical finding"; docs/apply.md).
    if (code != 0 && (app.got_subcommand("check") || app.got_subcommand("source-safety"))) return 1;
    // `pilot-package` documents exit 2 for a usage error (1: the bundle records a failure).
    if (code != 0 && app.got_subcommand("pilot-package")) return 2;
    return code;
  } catch (const trellara::cli::CommandFailed& e) {
    std::fflush(stdout);
    std::cerr << "trellara: " << e.what() << "\n";
    return e.exit_code;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::cerr << "trellara: internal error: " << e.what() << "\n";
    return 70;
  }
  return 0;
}
