// partition_applier.cpp — one partition applier of a partitioned flow (partition_applier.h,
// docs/partitioned.md).
#include "engine/partition_applier.h"

#include <unistd.h>

#include <chrono>
#include <iostream>
#include <thread>

#include "engine/applier.h"
#include "kit/errors.h"
#include "pg/session.h"
#include "pg/target_schema.h"
#include "trellara/base/cadence.h"
#include "trellara/base/fault.h"
#include "trellara/log/consumer_lock.h"
#include "trellara/log/consumer_offsets.h"
#include "trellara/log/retention.h"
#include "trellara/log/scan.h"
#include "trellara/log/uring_device.h"
#include "trellara/partition/partition.h"
#include "trellara/record/codec.h"

namespace trellara::cli::apply {
namespace {

// A failure of the target connection (lost, shutting down, restarting): reconnect and resume from
// the checkpoint, never a reason to stop.
struct TargetLost {
  std::string what;
};

bool Transient(const PgResult& r, const PgConnection& conn) {
  if (conn.connection_lost()) return true;
  const std::string& s = r.sqlstate();
  return s.empty() || s.rfind("08", 0) == 0 || s.rfind("57P", 0) == 0 || s == "40001" || s == "40P01";
}

std::string Lsn(uint64_t lsn) { return FormatLsn(lsn); }

}  // namespace

PartitionApplier::PartitionApplier(FlowConfig config, uint32_t partition, bool until_caught_up)
    : config_(std::move(config)),
      partition_(partition),
      until_caught_up_(until_caught_up),
      consumer_("partition-" + std::to_string(partition)) {}

std::string PartitionApplier::Name() const {
  return "partition " + std::to_string(partition_) + " of flow " + config_.flow_name;
}

PgResult PartitionApplier::Must(PgResult result, const std::string& what) {
  if (result.ok()) return result;
  if (Transient(result, *conn_)) throw TargetLost{what + ": " + result.Describe()};
  throw CommandFailed("partition applier of " + Name() + ": " + what + " failed on the target " + conn_->Describe() +
                      ": " + result.Describe());
}

void PartitionApplier::Connect() {
  batch_open_ = false;  // a batch of a lost session was rolled back with it: resume re-reads it
  batch_transactions_ = batch_chunks_ = batch_duplicates_ = 0;
  batch_rows_.clear();
  batch_bytes_ = 0;
  conn_ = ConnectPinned(config_, config_.target_conninfo, "target",
                        "trellara partition " + std::to_string(partition_) + " " + config_.flow_name);
  Must(conn_->Exec(TargetSchemaScript()), "creating the trellara state schema (sql/trellara_target.sql)");
  // The checkpoint is the resume point: it must be durable when the COMMIT returns.
  Must(conn_->Exec("SET synchronous_commit = on; SET session_replication_role = replica"),
       "setting the partition applier's session");
  Must(conn_->ExecParams("INSERT INTO trellara.partition_checkpoints (flow, partition, applier_pid) VALUES ($1, $2, $3) "
                         "ON CONFLICT (flow, partition) DO UPDATE SET applier_pid = EXCLUDED.applier_pid, "
                         "blocker = NULL, blocked_commit_lsn = NULL, blocked_at = NULL, updated_at = now()",
                         {config_.flow_name, std::to_string(partition_), std::to_string(getpid())}),
       "registering " + Name() + " in trellara.partition_checkpoints");
  PgResult r = Must(conn_->ExecParams("SELECT (commit_lsn - '0/0')::numeric::text, log_offset FROM "
                                      "trellara.partition_checkpoints WHERE flow = $1 AND partition = $2",
                                      {config_.flow_name, std::to_string(partition_)}),
                    "reading the checkpoint of " + Name());
  checkpoint_lsn_ = std::stoull(r.Value(0, 0).value_or("0"));
  checkpoint_offset_ = std::stoull(r.Value(0, 1).value_or("0"));
}

// Opens the log at the checkpoint's offset with a fresh barrier: whatever was read and not
// committed is read again; what the checkpoint covers is recognised by its commit LSN.
void PartitionApplier::Resume() {
  barrier_ = TransactionBarrier();
  auto reader = log::LogReader::Open(*device_, config_.log_directory);
  if (!reader)
    throw CommandFailed("cannot open the log of flow " + config_.flow_name + " at " + config_.log_directory + ": " +
                        reader.error().message);
  reader_ = std::move(reader.value());
  if (!log_watch_ && !until_caught_up_) log_watch_ = LogDirWatch::OpenOrWarn(config_.log_directory, Name() + ":");
  const uint64_t first = reader_->next_offset();
  if (checkpoint_offset_ < first) {
    if (checkpoint_lsn_ != 0)
      throw CommandFailed(Name() + " resumes at log offset " + std::to_string(checkpoint_offset_) +
                          " but the log at " + config_.log_directory + " starts at " + std::to_string(first) +
                          ": what the partition still needed was reclaimed; re-seed the flow's target");
    checkpoint_offset_ = first;
  }
  Status seek = reader_->Seek(checkpoint_offset_);
  if (!seek.ok())
    throw CommandFailed("cannot resume " + Name() + " at log offset " + std::to_string(checkpoint_offset_) + ": " +
                        seek.error().message);
  auto chunks = log::LogReader::Open(*device_, config_.log_directory);
  if (!chunks) throw CommandFailed("cannot open the log of flow " + config_.flow_name + ": " + chunks.error().message);
  chunk_reader_ = std::move(chunks.value());
  seen_lsn_ = checkpoint_lsn_;
  seen_offset_ = checkpoint_offset_;
  (void)log::WriteConsumerOffset(*device_, config_.log_directory, consumer_, checkpoint_offset_);
}

// Through a broker, flow.log_directory is the replica the flow's applier (the publisher) keeps
// from the stream on this host: it may not exist yet when the partition appliers start first.
bool PartitionApplier::WaitForReplica() {
  if (config_.transport.kind == TransportKind::Local) return true;
  bool announced = false;
  for (;;) {
    if (log::LogReader::Open(*device_, config_.log_directory)) return true;
    const std::string why = "the replica of the log at " + config_.log_directory + " (flow.log_directory) of flow " +
                            config_.flow_name + " does not hold a log yet";
    if (until_caught_up_)
      throw CommandFailed(Name() + " reads " + why + "; start the flow's applier (trellara apply --config " +
                              config_.path + ") first: it keeps the replica from the stream " +
                              config_.transport.stream,
                          kExitCouldNotRun);
    if (!announced) {
      std::cerr << "trellara apply: " << Name() << " event=waiting reason=\"" << why
                << "; the flow's applier (trellara apply --config " << config_.path
                << ") creates it from the stream\"" << std::endl;
      announced = true;
    }
    for (int i = 0; i < 10 && !StopRequested(); i++) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (StopRequested()) return false;
  }
}

void PartitionApplier::Run() {
  auto device = log::OpenUringDevice();
  if (!device) throw CommandFailed("cannot open io_uring for the log: " + device.error().message, kExitCouldNotRun);
  device_ = std::move(device.value());
  if (!WaitForReplica()) return;
  if (Status registered = log::RegisterConsumer(*device_, config_.log_directory, consumer_); !registered.ok())
    throw CommandFailed(registered.error().message, kExitCouldNotRun);
  bool held = false;
  auto lock = log::ConsumerLock::Acquire(config_.log_directory, consumer_, &held);
  if (!lock)
    throw CommandFailed(held ? "another partition applier of " + Name() + " is running (it holds " +
                                   config_.log_directory + "/consumers/" + consumer_ + ".lock); stop it first"
                             : "cannot lock consumer " + consumer_ + ": " + lock.error().message,
                        kExitCouldNotRun);
  if (until_caught_up_) {
    auto end = log::PublishedEndOffset(*device_, config_.log_directory);
    if (!end) throw CommandFailed("cannot read the end of the log of flow " + config_.flow_name + ": " + end.error().message);
    stop_offset_ = *end;
  }
  RetryBackoff backoff(BackoffPolicy{}, static_cast<uint64_t>(getpid()));
  for (;;) {
    try {
      Connect();
      Resume();
      backoff.Reset();
      std::cout << "trellara apply: " << Name() << " started at checkpoint " << Lsn(checkpoint_lsn_) << " (log offset "
                << checkpoint_offset_ << ")" << std::endl;
      Pump();
      std::cout << "trellara apply: " << Name() << " stopped at checkpoint " << Lsn(checkpoint_lsn_) << ": "
                << staged_transactions_ << " transactions (" << staged_chunks_ << " chunks) staged, "
                << duplicate_chunks_ << " duplicate chunks" << std::endl;
      return;
    } catch (const TargetLost& lost) {
      conn_.reset();
      const uint64_t wait = backoff.NextDelayMs();
      std::cerr << "trellara apply: " << Name() << " event=retry attempt=" << backoff.attempt() << " wait_ms=" << wait
                << ": " << lost.what << std::endl;
      for (uint64_t waited = 0; waited < wait && !StopRequested(); waited += 50)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (StopRequested()) return;
    }
  }
}

void PartitionApplier::Pump() {
  std::chrono::milliseconds idle = cadence::kApplierTail.min;
  auto last_checkpoint_write = std::chrono::steady_clock::now();
  for (;;) {
    if (StopRequested()) {
      CommitBatch();
      RecordCheckpointOnly();
      return;
    }
    auto next = reader_->Next();
    if (!next) throw CommandFailed("cannot read the log of flow " + config_.flow_name + ": " + next.error().message);
    if (!next->has_value()) {
      CommitBatch();
      RecordCheckpointOnly();
      if (until_caught_up_ && reader_->next_offset() >= stop_offset_) return;
      if (log_watch_)
        (void)log_watch_->Wait(idle);  // the next write to the log wakes it; the wait is the fallback
      else
        std::this_thread::sleep_for(idle);
      idle = cadence::kApplierTail.After(idle, false);
      continue;
    }
    idle = cadence::kApplierTail.min;
    const log::LogRecord& record = **next;
    auto fed = barrier_.Feed(LogFrame{record.offset, record.type, record.commit_lsn,
                                      std::span<const uint8_t>(record.payload.data(), record.payload.size())});
    if (!fed.ok()) {
      const auto& failure = barrier_.failure();
      Halt(failure && failure->tx ? failure->tx->commit_lsn : record.commit_lsn, fed.error().message);
    }
    if (!fed->has_value()) continue;
    const ReadyTransaction& ready = **fed;
    if (ready.tx.flow != config_.flow_name)
      throw CommandFailed("the log at " + config_.log_directory + " belongs to flow " + ready.tx.flow + ", not " +
                          config_.flow_name);
    if (ready.tx.commit_lsn <= checkpoint_lsn_) continue;  // committed before: evidence holds it
    if (auto refused = Stage(ready)) Halt(ready.tx.commit_lsn, refused->reason);
    seen_lsn_ = std::max(seen_lsn_, ready.tx.commit_lsn);
    seen_offset_ = std::max(seen_offset_, barrier_.RetainFromOffset().value_or(ready.end_offset));
    if (batch_open_ && (batch_transactions_ >= cadence::kPartitionBatchTransactions ||
                        batch_bytes_ >= cadence::kPartitionBatchBytes ||
                        std::chrono::steady_clock::now() - batch_started_ > cadence::kPartitionBatchAge))
      CommitBatch();
    if (!batch_open_ && std::chrono::steady_clock::now() - last_checkpoint_write > cadence::kApplierOffsetWrite) {
      RecordCheckpointOnly();
      last_checkpoint_write = std::chrono::steady_clock::now();
    }
  }
}

// Evidence for the transactions read since the last commit that had no part for this partition
// (strict ones, partitioned ones that do not list it): the checkpoint moves past them, so the
// watermark and a restart need not wait for or re-read them.
void PartitionApplier::RecordCheckpointOnly() {
  if (batch_open_) return;  // the batch's COMMIT records it
  if (seen_lsn_ <= checkpoint_lsn_ && seen_offset_ <= checkpoint_offset_) return;
  Must(conn_->ExecParams("UPDATE trellara.partition_checkpoints SET commit_lsn = greatest(commit_lsn, $3::pg_lsn), "
                         "log_offset = greatest(log_offset, $4::bigint), updated_at = now() "
                         "WHERE flow = $1 AND partition = $2",
                         {config_.flow_name, std::to_string(partition_), Lsn(seen_lsn_), std::to_string(seen_offset_)}),
       "recording the checkpoint of " + Name());
  checkpoint_lsn_ = std::max(checkpoint_lsn_, seen_lsn_);
  checkpoint_offset_ = std::max(checkpoint_offset_, seen_offset_);
  (void)log::WriteConsumerOffset(*device_, config_.log_directory, consumer_, checkpoint_offset_);
}

std::optional<PartitionApplier::Refusal> PartitionApplier::Stage(const ReadyTransaction& ready) {
  if (!ready.partitioned()) return std::nullopt;  // the publisher applies it from the log
  const Manifest& manifest = *ready.manifest;
  const partition::PartitionMap map{manifest.map_version, manifest.partitions};
  std::vector<const ChunkLocation*> mine;
  for (const ChunkLocation& loc : ready.chunks)
    if (loc.partition_id == partition_) mine.push_back(&loc);
  if (mine.empty()) return std::nullopt;
  const std::string tx = DescribeTransaction(ready.tx);
  const std::string resume = std::to_string(barrier_.RetainFromOffset().value_or(ready.end_offset));
  // Negative control (tests only, TRELLARA_FAULTS=defect.partition_checkpoint_outside:1:defect):
  // the checkpoint commits on its own before the chunks, so a kill between the two leaves
  // evidence without data — the publisher must then fail closed, never publish a partial transaction.
  if (fault::Hit("defect.partition_checkpoint_outside") == fault::Action::Defect) {
    CommitBatch();
    Must(conn_->ExecParams("UPDATE trellara.partition_checkpoints SET commit_lsn = $3::pg_lsn, "
                           "log_offset = $4::bigint, map_version = $5::int, updated_at = now() "
                           "WHERE flow = $1 AND partition = $2",
                           {config_.flow_name, std::to_string(partition_),
                                                   Lsn(ready.tx.commit_lsn), resume, std::to_string(map.version)}),
         "recording the checkpoint of " + Name());
    fault::Hit("partition.after_checkpoint_before_stage");
  }
  // Every chunk of this partition is checked before anything of the transaction is staged: a
  // refusal leaves nothing of it behind (the transactions before it keep their evidence).
  std::map<uint32_t, ChunkRef> accepted;
  std::vector<StagedRow> rows;
  uint64_t duplicates = 0;
  auto refuse = [&](const std::string& why) {
    CommitBatch();
    return std::optional<Refusal>(Refusal{why});
  };
  for (const ChunkLocation* loc : mine) {
    // Re-read by offset and checked again against what the barrier verified.
    if (Status s = chunk_reader_->Seek(loc->offset); !s.ok()) return refuse("cannot re-read chunk " + std::to_string(loc->seq) + " of " + tx + ": " + s.error().message);
    auto frame = chunk_reader_->Next();
    if (!frame || !frame->has_value())
      return refuse("cannot re-read chunk " + std::to_string(loc->seq) + " of " + tx + " at log offset " +
                    std::to_string(loc->offset));
    const std::vector<uint8_t>& bytes = (**frame).payload;
    auto decoded = DecodeRecord(std::span<const uint8_t>(bytes.data(), bytes.size()));
    const Chunk* chunk = decoded ? std::get_if<Chunk>(&*decoded) : nullptr;
    if (chunk == nullptr || !VerifyRecordChecksum(*decoded).ok() || !(chunk->tx == ready.tx) ||
        chunk->checksum != loc->checksum)
      return refuse("chunk " + std::to_string(loc->seq) + " of " + tx + " at log offset " + std::to_string(loc->offset) +
                    " is not the chunk the barrier verified; the log changed under the partition applier");
    // The routing header: this partition's, and listed so by the manifest (core CheckChunk).
    const ChunkRef ref{chunk->seq, chunk->partition_id, chunk->event_count, chunk->checksum, chunk->partition_seq};
    const partition::ChunkVerdict verdict = partition::CheckChunk(partition_, ref, manifest.chunks, accepted);
    if (verdict == partition::ChunkVerdict::Duplicate) {
      duplicates++;
      continue;
    }
    if (partition::Refused(verdict))
      return refuse("chunk " + std::to_string(chunk->seq) + " of " + tx + " (routing header: partition " +
                    std::to_string(chunk->partition_id) + ", sequence " + std::to_string(chunk->partition_seq) +
                    ") refused by partition " + std::to_string(partition_) + ": " +
                    partition::ChunkVerdictName(verdict));
    // Every row must route here under the manifest's map (core CheckRowsRoute).
    if (auto mismatch = partition::CheckRowsRoute(map, *chunk, partition_))
      return refuse(*mismatch + " (" + tx + ")");
    accepted.emplace(chunk->seq, ref);
    rows.push_back(StagedRow{Lsn(ready.tx.commit_lsn), chunk->seq, ready.tx.xid, HexEncode(bytes.data(), bytes.size())});
  }
  if (const auto missing = partition::MissingChunks(partition_, manifest.chunks, accepted); !missing.empty()) {
    std::string seqs;
    for (uint32_t s : missing) seqs += (seqs.empty() ? "" : ", ") + std::to_string(s);
    return refuse("the manifest of " + tx + " lists chunk(s) " + seqs + " for partition " + std::to_string(partition_) +
                  " that it did not accept: missing_chunk");
  }
  // Into the open batch: staged on the target, with the checkpoint of its last transaction, in
  // one target transaction when the batch commits (CommitBatch).
  if (!batch_open_) {
    batch_open_ = true;
    batch_started_ = std::chrono::steady_clock::now();
  }
  for (StagedRow& row : rows) {
    batch_bytes_ += row.record_hex.size();
    batch_rows_.push_back(std::move(row));
  }
  batch_lsn_ = ready.tx.commit_lsn;
  batch_offset_ = std::stoull(resume);
  batch_map_version_ = map.version;
  batch_commit_time_us_ = ready.commit_time_us;
  batch_transactions_++;
  batch_chunks_ += accepted.size();
  batch_duplicates_ += duplicates;
  return std::nullopt;
}

// Commits the open batch with the checkpoint of its last source transaction: the chunks and the
// evidence for them become durable together, or neither does.
void PartitionApplier::CommitBatch() {
  if (!batch_open_) return;
  Must(conn_->Exec("BEGIN"), "BEGIN of the staged chunks of " + Name());
  if (!batch_rows_.empty()) {
    // Every chunk of the batch in one statement (arrays of hex digits, LSNs and integers need no
    // quoting in an array literal).
    std::string lsns = "{", seqs = "{", xids = "{", records = "{";
    for (const StagedRow& row : batch_rows_) {
      const char* sep = lsns.size() > 1 ? "," : "";
      lsns += sep + row.commit_lsn;
      seqs += sep + std::to_string(row.seq);
      xids += sep + std::to_string(row.xid);
      records += sep + row.record_hex;
    }
    Must(conn_->ExecParams("INSERT INTO trellara.partition_stage (flow, commit_lsn, seq, partition, xid, record) "
                           "SELECT $1, l::pg_lsn, s, $2::int, x, decode(r, 'hex') "
                           "FROM unnest($3::text[], $4::int[], $5::bigint[], $6::text[]) AS t(l, s, x, r)",
                           {config_.flow_name, std::to_string(partition_), lsns + "}", seqs + "}", xids + "}",
                            records + "}"}),
         "staging " + std::to_string(batch_rows_.size()) + " chunk(s) of " + Name());
    // Fault point (tests): the chunks are staged in the open target transaction, the checkpoint
    // not moved yet (one pass per chunk).
    for (size_t i = 0; i < batch_rows_.size(); i++) fault::Hit("partition.after_stage_chunk");
  }
  if (batch_transactions_ > 0) {
    const SqlParams checkpoint{config_.flow_name, std::to_string(partition_), Lsn(batch_lsn_),
                               std::to_string(batch_offset_), std::to_string(batch_map_version_),
                               std::to_string(batch_transactions_), std::to_string(batch_chunks_),
                               std::to_string(batch_duplicates_), std::to_string(batch_commit_time_us_)};
    Must(conn_->ExecParams(
             "UPDATE trellara.partition_checkpoints SET commit_lsn = $3::pg_lsn, log_offset = $4::bigint, "
             "map_version = $5::int, transactions = transactions + $6::bigint, chunks = chunks + $7::bigint, "
             "duplicate_chunks = duplicate_chunks + $8::bigint, "
             "last_commit_time = to_timestamp($9::double precision / 1000000), updated_at = now() "
             "WHERE flow = $1 AND partition = $2",
             checkpoint),
         "recording the checkpoint of " + Name());
  }
  // Fault point (tests): the chunks and the checkpoint are written, not committed.
  fault::Hit("partition.before_commit");
  Must(conn_->Exec("COMMIT"), "COMMIT of the staged chunks of " + Name());
  batch_open_ = false;
  // Fault point (tests): committed; the log consumer offset is not written yet.
  fault::Hit("partition.after_commit");
  if (batch_transactions_ > 0) {
    checkpoint_lsn_ = std::max(checkpoint_lsn_, batch_lsn_);
    checkpoint_offset_ = std::max(checkpoint_offset_, batch_offset_);
    staged_transactions_ += batch_transactions_;
    staged_chunks_ += batch_chunks_;
    duplicate_chunks_ += batch_duplicates_;
  }
  batch_transactions_ = batch_chunks_ = batch_duplicates_ = 0;
  batch_rows_.clear();
  batch_bytes_ = 0;
}

void PartitionApplier::Halt(uint64_t commit_lsn, const std::string& reason) {
  CommitBatch();  // the transactions before the refused one keep their evidence
  std::cerr << "trellara apply: " << Name() << " refused the transaction at commit LSN " << Lsn(commit_lsn)
            << " before staging anything of it: " << reason
            << "; the publisher quarantines it when it reaches it. Repair the log (trellara repair-plan), then "
               "restart this partition applier to retry"
            << std::endl;
  Must(conn_->ExecParams("UPDATE trellara.partition_checkpoints SET blocker = $3, blocked_commit_lsn = $4::pg_lsn, "
                         "blocked_at = now(), updated_at = now() WHERE flow = $1 AND partition = $2",
                         {config_.flow_name, std::to_string(partition_), reason, Lsn(commit_lsn)}),
       "recording the blocker of " + Name());
  if (until_caught_up_) throw CommandFailed(Name() + " is blocked: " + reason, kExitFlowBlocked);
  while (!StopRequested()) std::this_thread::sleep_for(cadence::kApplierStopCheck);
  throw CommandFailed(Name() + " stopped while blocked: " + reason, kExitFlowBlocked);
}

}  // namespace trellara::cli::apply
