// hold_point.cpp — the exact point of verify and reseed --where (hold_point.h, docs/snapshot.md
// "Verify and filtered reseed: holds").
//
// Order of the protocol, and why:
//   1. hold lock (session, exclusive) before the hold row exists: the applier that marks the hold
//      reached then waits on this lock, so it cannot run past C before we read the target.
//   2. slot with exported snapshot on a replication connection: C and the source snapshot of C.
//   3. hold row 'requested' at C + apply_control.version bump, one transaction under the control
//      lock (exclusive): the applier's next transaction sees the new version (TR010) and reloads.
//   3b. ask the source's relay for a progress marker past C (trellara.request_progress), so an
//      idle flow's log covers C at once instead of at the relay's next periodic marker.
//   4. wait for 'reached' (retry 'passed' with a new slot).
//   5. the caller imports the source snapshot, opens its target snapshot, then Release(): unlock
//      first (the applier may be waiting on it inside its transaction while holding the control
//      lock shared), then delete the row under the control lock.
#include "trellara/base/cadence.h"
#include "engine/hold_point.h"

#include <unistd.h>

#include <iostream>
#include <thread>

#include "kit/errors.h"
#include "pg/session.h"
#include "trellara/record/envelope.h"

namespace trellara::cli {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kHoldAttemptsMax = 4;  // a hold found 'passed' is retried with a new slot this often
constexpr auto kPollInterval = cadence::kHoldPoll;
// An applier started just before verify may not hold its lock yet: "not running" only after this long.
constexpr auto kNotRunningGrace = cadence::kHoldNotRunningGrace;

const char* const kHoldLockSql = "SELECT pg_catalog.pg_advisory_lock(pg_catalog.hashtextextended('trellara hold ' || $1, 0))";
const char* const kHoldUnlockSql =
    "SELECT pg_catalog.pg_advisory_unlock(pg_catalog.hashtextextended('trellara hold ' || $1, 0))";
const char* const kControlLockSql =
    "SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended('trellara control ' || $1, 0))";
const char* const kBumpVersionSql =
    "INSERT INTO trellara.apply_control AS c (flow, version) VALUES ($1, 1) "
    "ON CONFLICT (flow) DO UPDATE SET version = c.version + 1, updated_at = now()";

}  // namespace

HoldPoint::HoldPoint(const FlowConfig& config, PgConnection& control, std::chrono::seconds timeout,
                     const std::string& purpose)
    : config_(config), control_(control), purpose_(purpose) {
  const auto deadline = Clock::now() + timeout;
  MustSucceed(control_, control_.ExecParams(kHoldLockSql, {config_.flow_name}),
              "taking the hold lock of flow " + config_.flow_name);
  hold_locked_ = true;
  try {
    for (int attempt = 1; attempt <= kHoldAttemptsMax; attempt++) {
      attempts_ = attempt;
      CreateSlot(attempt);
      RequestHold();
      AskRelayForProgress();
      const std::string answer = WaitAnswer(deadline);
      if (answer == "reached") return;
      // passed: the applier was already beyond C; C of a new slot is later.
      RemoveHoldRow();
      DropSlot();
      std::cerr << purpose_ << " flow=" << config_.flow_name << ": the applier was already past " << FormatLsn(lsn_)
                << "; retrying with a new slot (attempt " << attempt + 1 << " of " << kHoldAttemptsMax << ")\n";
    }
    throw CommandFailed("could not " + purpose_ + " flow " + config_.flow_name + ": the applier was already past the " +
                            "source's consistent point " + std::to_string(kHoldAttemptsMax) +
                            " times in a row (hold found 'passed'); rerun " + purpose_,
                        kExitCouldNotHold);
  } catch (...) {
    Release();
    DropSlot();
    throw;
  }
}

HoldPoint::~HoldPoint() {
  try {
    Release();
    DropSlot();
  } catch (const std::exception& e) {
    std::cerr << "trellara: releasing the hold of flow " << config_.flow_name << " failed: " << e.what()
              << " (the hold lock and row go away when this session ends)\n";
  }
}

void HoldPoint::CreateSlot(int attempt) {
  auto conn = PgConnection::ConnectReplication(config_.source_conninfo, "trellara-" + purpose_ + "/" + config_.flow_name);
  if (!conn)
    throw CommandFailed("could not " + purpose_ + " flow " + config_.flow_name + ": " + conn.error().message +
                            " (source.conninfo in " + config_.path + ")",
                        kExitCouldNotHold);
  replication_ = std::move(conn.value());
  // Slot names: lower-case letters, digits and underscores only.
  const std::string slot = "trellara_" + purpose_ + "_" + std::to_string(getpid()) + "_" + std::to_string(attempt);
  auto r = replication_->Exec("CREATE_REPLICATION_SLOT " + slot + " TEMPORARY LOGICAL pgoutput (SNAPSHOT 'export')");
  if (!r.ok() || r.rows() != 1)
    throw CommandFailed("could not " + purpose_ + " flow " + config_.flow_name +
                            ": creating a temporary replication slot with an exported snapshot on the source " +
                            replication_->Describe() + " failed: " + r.Describe() +
                            "; the source needs a free replication slot (max_replication_slots) and wal_level = logical",
                        kExitCouldNotHold);
  // Columns: slot_name, consistent_point, snapshot_name, output_plugin.
  const auto point = ParseLsn(r.Value(0, 1).value_or(""));
  snapshot_name_ = r.Value(0, 2).value_or("");
  const bool name_ok = snapshot_name_.find_first_not_of("0123456789ABCDEFabcdef-") == std::string::npos;
  if (!point || snapshot_name_.empty() || !name_ok)
    throw CommandFailed("could not " + purpose_ + " flow " + config_.flow_name +
                            ": CREATE_REPLICATION_SLOT answered no consistent point or snapshot name",
                        kExitCouldNotHold);
  lsn_ = *point;
  hold_id_ = purpose_ + "-" + std::to_string(getpid()) + "-" + std::to_string(attempt) + "-" + FormatLsn(lsn_);
}

void HoldPoint::RequestHold() {
  const std::string what = "requesting hold " + hold_id_ + " of flow " + config_.flow_name;
  MustSucceed(control_, control_.Exec("BEGIN"), what);
  MustSucceed(control_, control_.ExecParams(kControlLockSql, {config_.flow_name}), what);
  MustSucceed(control_,
              control_.ExecParams("INSERT INTO trellara.apply_holds (flow, hold_id, lsn, state) VALUES ($1, $2, $3, 'requested')",
                                  {config_.flow_name, hold_id_, FormatLsn(lsn_)}),
              what);
  MustSucceed(control_, control_.ExecParams(kBumpVersionSql, {config_.flow_name}), what);
  MustSucceed(control_, control_.Exec("COMMIT"), what);
  hold_row_ = true;
}

void HoldPoint::AskRelayForProgress() {
  const std::string why_wait = "; the applier reaches it when the relay next logs past it on its own (an idle flow's "
                               "relay marks progress every trellara.progress_interval, 10 s by default)";
  auto conn = PgConnection::Connect(config_.source_conninfo, "trellara-" + purpose_ + "/" + config_.flow_name);
  if (!conn) {
    std::cerr << purpose_ << " flow=" << config_.flow_name << ": could not ask the relay to log past "
              << FormatLsn(lsn_) << ": " << conn.error().message << why_wait << "\n";
    return;
  }
  auto r = conn.value()->ExecParams("SELECT trellara.request_progress($1, $2::pg_lsn)",
                                    {config_.flow_name, FormatLsn(lsn_)});
  if (!r.ok() || r.rows() != 1) {
    std::cerr << purpose_ << " flow=" << config_.flow_name << ": could not ask the relay to log past "
              << FormatLsn(lsn_) << " (trellara.request_progress on the source, EXECUTE granted to trellara_admin): "
              << r.Describe() << why_wait << "\n";
    return;
  }
  if (r.Value(0, 0) != std::optional<std::string>("t"))
    std::cerr << purpose_ << " flow=" << config_.flow_name << ": the relay of flow " << config_.flow_name
              << " is not running on the source (SELECT * FROM trellara.status()); the applier reaches "
              << FormatLsn(lsn_) << " only once a relay logs past it\n";
}

void HoldPoint::RemoveHoldRow() {
  if (!hold_row_) return;
  const std::string what = "removing hold " + hold_id_ + " of flow " + config_.flow_name;
  if (control_.InTransaction()) control_.Exec("ROLLBACK");
  MustSucceed(control_, control_.Exec("BEGIN"), what);
  MustSucceed(control_, control_.ExecParams(kControlLockSql, {config_.flow_name}), what);
  MustSucceed(control_,
              control_.ExecParams("DELETE FROM trellara.apply_holds WHERE flow = $1 AND hold_id = $2",
                                  {config_.flow_name, hold_id_}),
              what);
  MustSucceed(control_, control_.ExecParams(kBumpVersionSql, {config_.flow_name}), what);
  MustSucceed(control_, control_.Exec("COMMIT"), what);
  hold_row_ = false;
}

std::string HoldPoint::WaitAnswer(Clock::time_point deadline) {
  Clock::time_point not_running_since{};
  bool was_running = true;
  for (;;) {
    auto hold = MustSucceed(control_,
                            control_.ExecParams("SELECT state, applied_lsn::text FROM trellara.apply_holds "
                                                "WHERE flow = $1 AND hold_id = $2",
                                                {config_.flow_name, hold_id_}),
                            "reading hold " + hold_id_ + " of flow " + config_.flow_name);
    const std::string state = hold.rows() == 1 ? hold.Value(0, 0).value_or("") : "removed";
    if (state == "reached" || state == "passed") return state;
    if (state == "removed")
      throw CommandFailed("could not " + purpose_ + " flow " + config_.flow_name + ": hold " + hold_id_ +
                              " was removed from trellara.apply_holds by someone else",
                          kExitCouldNotHold);
    auto status = MustSucceed(control_,
                              control_.ExecParams("SELECT applier_running, applied_commit_lsn::text, quarantined "
                                                  "FROM trellara.apply_status() WHERE flow = $1",
                                                  {config_.flow_name}),
                              "reading trellara.apply_status() of flow " + config_.flow_name);
    const bool running = status.rows() == 1 && status.Value(0, 0) == std::optional<std::string>("t");
    const std::string applied = status.rows() == 1 ? status.Value(0, 1).value_or("nothing") : "nothing";
    const bool blocked = status.rows() == 1 && status.Value(0, 2).value_or("0") != "0";
    const std::string at = " (source consistent point " + FormatLsn(lsn_) + ", target applied " + applied + ")";
    if (blocked) {
      auto q = control_.ExecParams("SELECT xid::text, commit_lsn::text, message FROM trellara.quarantine "
                                   "WHERE flow = $1 AND state = 'quarantined' ORDER BY commit_lsn LIMIT 1",
                                   {config_.flow_name});
      std::string which = "a quarantined transaction", replay;
      if (q.ok() && q.rows() == 1) {
        which = "quarantined transaction " + q.Value(0, 0).value_or("") + " (commit " + q.Value(0, 1).value_or("") +
                "): " + q.Value(0, 2).value_or("");
        replay = "; after repairing the target: trellara quarantine replay-ready --config " + config_.path + " --xid " +
                 q.Value(0, 0).value_or("") + " --commit-lsn " + q.Value(0, 1).value_or("");
      }
      throw CommandFailed("could not " + purpose_ + " flow " + config_.flow_name + ": the flow is blocked, the applier "
                              "halted at " + which + at + replay +
                              "; or re-copy the table (trellara reseed --config " + config_.path +
                              " --table T without --where), then rerun",
                          kExitCouldNotHold);
    }
    if (!running && was_running) not_running_since = Clock::now();
    was_running = running;
    if (!running && Clock::now() - not_running_since >= kNotRunningGrace)
      throw CommandFailed("could not " + purpose_ + " flow " + config_.flow_name + ": no applier is running" + at +
                              "; " + purpose_ + " compares against a live applier held at the source's point: start "
                              "trellara apply --config " + config_.path + " and rerun",
                          kExitCouldNotHold);
    if (Clock::now() >= deadline)
      throw CommandFailed("could not " + purpose_ + " flow " + config_.flow_name +
                              ": the applier did not reach the source's consistent point within --timeout" + at +
                              "; it is still catching up (or cannot hold): rerun later or with a larger --timeout",
                          kExitCouldNotHold);
    std::this_thread::sleep_for(kPollInterval);
  }
}

void HoldPoint::ImportSnapshot(PgConnection& source) const {
  MustSucceed(source, source.Exec("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"),
              "opening the source transaction of the hold");
  MustSucceed(source, source.Exec("SET TRANSACTION SNAPSHOT '" + snapshot_name_ + "'"),
              "importing the exported snapshot " + snapshot_name_ + " of the hold");
}

void HoldPoint::DropSlot() { replication_.reset(); }

void HoldPoint::Release() {
  if (hold_locked_) {
    if (control_.InTransaction()) control_.Exec("ROLLBACK");
    MustSucceed(control_, control_.ExecParams(kHoldUnlockSql, {config_.flow_name}),
                "releasing the hold lock of flow " + config_.flow_name);
    hold_locked_ = false;
  }
  RemoveHoldRow();
}

}  // namespace trellara::cli
