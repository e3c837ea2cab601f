// applier.h — the applier of one flow: reads the flow's durable log and commits it to the
// target, one target transaction per source transaction, exactly once (DESIGN §2, §6).
//
// Its parts live in one file per concern:
//   applier.cpp            the main loop over the log and its retries
//   apply_log.cpp          the place in the log: opening, resuming, continuity, the consumer offset
//   apply_transaction.cpp  the one-at-a-time path: one transaction, decided by core, applied or
//                          quarantined; captured DDL (core PlanDdl) and schema drift (core
//                          CheckKnownRelation) are decided there, in transaction order
//   apply_pipeline.cpp     batches of whole transactions through one libpq pipeline segment
//   apply_chunked.cpp      a chunked transaction's changes inside its one target transaction:
//                          INSERT runs as COPY, other row changes in bounded pipeline segments
//   apply_partitioned.cpp  partitioned transactions: wait for the partitions' evidence, publish
//                          what they staged (docs/partitioned.md)
//   apply_session.cpp      the target session and the trellara state tables
//   apply_snapshot.cpp     the snapshot handoff rule for tables being copied, and holds
//                          (docs/snapshot.md): every target transaction of both paths starts with
//                          trellara.control_check; TR010 reloads the registry and retries
//   apply_progress.cpp     the progress lines
//   apply_metrics.cpp      what the applier hands GET /metrics (PublishMetrics)
//   metrics_server.cpp     GET /metrics ([metrics] listen): what PublishMetrics last handed over
//
// It never applies a transaction the barrier did not yield, never applies anything after a
// quarantined transaction, never advances the consumer offset past a transaction that is not
// durable on the target (nor past the first frame of an open chunked transaction), and never
// decides on its own what is a duplicate or a conflict: core does.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <map>
#include <set>
#include <unordered_set>
#include <string>
#include <utility>
#include <vector>

#include "broker/stream_receiver.h"
#include "engine/apply_progress.h"
#include "engine/apply_session.h"
#include "engine/apply_snapshot.h"
#include "kit/config.h"
#include "kit/log_watch.h"
#include "engine/metrics_server.h"
#include "pg/pg_connection.h"
#include "trellara/apply/apply_decision.h"
#include "trellara/apply/apply_early.h"
#include "trellara/apply/apply_pipeline.h"
#include "trellara/apply/apply_plan.h"
#include "trellara/apply/apply_retry.h"
#include "trellara/apply/relation_drift.h"
#include "trellara/log/barrier.h"
#include "trellara/log/consumer_lock.h"
#include "trellara/log/consumer_offsets.h"
#include "trellara/log/reader.h"
#include "trellara/partition/partition.h"

namespace trellara::cli::apply {

// The applier's registered consumer in the log directory (consumers/applier).
constexpr const char* kConsumerName = log::kApplierConsumer;
// A batch ends at this many transactions or queued statements, whichever comes first, or when the
// log has nothing more to read. The bounds keep what a batch holds in memory small: the decoded
// transactions and their plans, and the server's answers (about 100 bytes per statement) that
// libpq buffers while the applier is still queueing (libpq reads input whenever a send would
// block, so a full socket cannot deadlock the pipeline).
constexpr size_t kBatchMaxTransactions = 256;
constexpr size_t kBatchMaxStatements = 1024;

// SIGINT/SIGTERM ask the applier to stop at the next transaction boundary (applier.cpp).
void InstallStopHandlers();
bool StopRequested();

enum class Outcome { Applied, SkippedDuplicate, Stopped };

// A partitioned transaction at the publisher (apply_partitioned.cpp): every listed partition holds
// evidence (publish it), one of them refused it (quarantine it), or a stop was asked meanwhile.
enum class PartitionGate { Publish, Refused, Stopped };

// What each message queued in a batch answers, in order.
enum class What { Begin, ControlCheck, EvidenceCheck, Record, Prepare, Statement, UpdateGuard, Commit };

// How one attempt of the one-at-a-time path ended.
struct Attempt {
  enum class Kind { Committed, Failed, RegistryChanged } kind = Kind::Committed;
  QuarantineCause cause;  // Failed
};

// The snapshot rule applied to one change (apply_snapshot.cpp): what to execute instead.
struct SnapshotRewrite {
  std::vector<ChangePlan> plans;                           // in order; empty: nothing to execute
  std::vector<std::pair<SnapshotTable*, int32_t>> skips;   // pending chunks the change is left out of
  uint64_t left_out = 0;                                   // row changes (or chunk ranges) the copies hold
  bool needs_alone = false;  // batch path: a chunk state must be read or a skip recorded
  std::optional<QuarantineCause> cause;
};
struct Expect {
  size_t index;  // the transaction, in the batch (ApplyPipeline::at)
  What what;
  std::string statement_key;  // Prepare: forgotten again if the Parse failed or was skipped
};

class Applier {
 public:
  Applier(FlowConfig config, bool until_caught_up);
  void Run();

 private:
  // ---- applier.cpp: the loop and its retries ---------------------------------------
  bool WaitForLogDirectory();
  bool RecoverFrom(TransientFailure failure);
  void WriteStateFile(const std::string& state, const std::string& last_error, const std::string& sqlstate);
  [[noreturn]] void BarrierFailed(const BarrierFailure& failure);
  void Loop();
  void WriteStatus(const std::string& state, const std::string& last_error);
  ProgressFigures Figures(bool with_log_end) const;
  // At the log's end: waits up to `wait` for more. A remote applier reads the stream meanwhile
  // (its receiver appends to the replica); true when records were appended.
  bool IdleWait(std::chrono::milliseconds wait);
  // The stream delivered a record that contradicts the replica: quarantined, the flow stops.
  [[noreturn]] void StopOnConflict(const broker::ConflictingDelivery& conflict);

  // ---- apply_log.cpp: the place in the log and the consumer offset ------------------
  void CheckTimeline();
  void OpenLog();
  void ResumeLog();
  uint64_t CheckContinuity(std::optional<uint64_t> recorded_offset);
  void CheckLogFlow(const log::LogRecord& record);
  void CheckFlowOf(const TxIdentity& tx);
  void WriteOffset(bool force);

  // ---- apply_transaction.cpp: one transaction -------------------------------------------
  PgResult Must(PgResult result, const std::string& what) { return session_.Must(std::move(result), what); }
  static QuarantineCause CauseOf(const PgResult& result, const ChangePlan& plan);
  static ApplyDecision Decide(const ReadyTransaction& ready, const TargetEvidence& target);
  std::optional<QuarantineCause> ExecuteChange(const Change& change, const std::vector<RelationInfo>& relations,
                                               const TxIdentity& tx);
  std::optional<QuarantineCause> ExecutePlan(const ChangePlan& plan, const TxIdentity& tx);
  std::optional<QuarantineCause> CheckDrift(const Change& change, const std::vector<RelationInfo>& relations,
                                            const TxIdentity& tx);
  KnownLookup FlowKnows();
  std::optional<QuarantineCause> ExecuteDdl(const Change& change, const std::vector<RelationInfo>& relations,
                                            const TxIdentity& tx);
  // CREATE TABLE AS / SELECT INTO (core CreatesRelation): `failure` of row change `change` says its
  // table is missing on the target and `create` (found later in the same transaction) creates it:
  // run the CREATE now and `retry` the change. Otherwise `failure` as it is.
  std::optional<QuarantineCause> CreateAhead(const Change& change, std::optional<QuarantineCause> failure,
                                             const Change* create, const std::vector<RelationInfo>& create_relations,
                                             const TxIdentity& tx,
                                             const std::function<std::optional<QuarantineCause>()>& retry);
  Result<std::vector<uint8_t>> ReadChunkFrame(uint64_t offset);
  Attempt ApplyInTransaction(const ReadyTransaction& ready, bool resolves_quarantine);
  // The pieces of an attempt, shared with the early path (apply_early.cpp): reset what an attempt
  // counts; BEGIN and trellara.control_check (RegistryChanged when the registry moved, rolled
  // back); a statement's failure as the attempt's cause (transient ones throw); and the end —
  // COMMIT with its bookkeeping, or on a failure ROLLBACK and the origin reset.
  void ResetAttempt(bool resolves_quarantine);
  std::optional<Attempt> BeginAttempt(const TxIdentity& tx);
  void Step(PgResult r, const char* what, const TxIdentity& tx, std::optional<QuarantineCause>& failure);
  Attempt EndAttempt(const ReadyTransaction& ready, std::optional<QuarantineCause> failure, bool resolves_quarantine);
  void Quarantine(const ReadyTransaction& ready, const QuarantineCause& cause, uint32_t previous_attempts);
  bool WaitWhileBlocked(const std::string& message);
  Outcome Process(const ReadyTransaction& ready);

  // ---- apply_chunked.cpp: a chunked transaction's changes, batched ---------------------
  std::optional<QuarantineCause> StageChunkedChange(const Change& change, const std::vector<RelationInfo>& relations,
                                                    const TxIdentity& tx);
  std::optional<QuarantineCause> FlushChunked(const TxIdentity& tx);
  std::optional<QuarantineCause> QueueInsertRow(ChangePlan plan, const RelationInfo& relation, const TxIdentity& tx);
  std::optional<QuarantineCause> EndInsertRun(const TxIdentity& tx);
  std::optional<QuarantineCause> StartCopy(const TxIdentity& tx);
  std::optional<QuarantineCause> CopyRowAppended(const TxIdentity& tx);
  std::optional<QuarantineCause> FinishCopy(const TxIdentity& tx);
  std::optional<QuarantineCause> QueueUpdateRow(ChangePlan plan, const TxIdentity& tx);
  std::optional<QuarantineCause> EndUpdateRun(const TxIdentity& tx);
  std::optional<QuarantineCause> SendUpdateBatch(const TxIdentity& tx);
  // The one statement of a run of UPDATEs (core UpdateBatchSql) with `rows`' values bound.
  static ChangePlan UpdateBatchPlan(const std::vector<const ChangePlan*>& rows, const std::vector<std::string>& types);
  // The arguments of trellara.batch_column_types for `plan`'s shape: relation, columns, key columns.
  static SqlParams UpdateBatchTypesParams(const ChangePlan& plan);
  std::optional<std::vector<std::string>> AskUpdateBatchTypes(const ChangePlan& plan, const std::string& what,
                                                              const std::string& consequence);
  const std::vector<std::string>* UpdateBatchTypes(const ChangePlan& plan, const TxIdentity& tx,
                                                   std::optional<QuarantineCause>& cause);
  std::optional<QuarantineCause> QueuePiped(ChangePlan plan, const TxIdentity& tx,
                                            std::vector<std::string> batch_matches = {});
  std::optional<QuarantineCause> FlushPiped(const TxIdentity& tx);
  void ResetChunked();

  // ---- apply_partitioned.cpp: the publisher of partitioned transactions ---------------------
  PartitionGate WaitForPartitions(const ReadyTransaction& ready, QuarantineCause& cause);
  std::vector<uint32_t> PartitionsWithoutApplier(const std::vector<uint32_t>& partitions);
  // A staged chunk: from `preloaded` (seq -> hex of the record) when given, else read by itself.
  Result<Chunk> ReadStagedChunk(const ReadyTransaction& ready, const ChunkRef& ref,
                                const std::map<uint32_t, std::string>* preloaded);
  std::optional<QuarantineCause> ApplyPartitionedChanges(const ReadyTransaction& ready);
  // commit LSN -> seq -> hex of the staged record, for the transactions asked for (one round trip).
  using StagedChunks = std::map<uint64_t, std::map<uint32_t, std::string>>;
  StagedChunks ReadStaged(const std::vector<uint64_t>& commit_lsns, const std::string& what);
  // Reads trellara.partition_checkpoints into partition_evidence_ (and each partition's blocker).
  std::map<uint32_t, partition::PartitionBlocker> ReadPartitionCheckpoints();
  // Whether a partitioned transaction rides the batch pipeline (no larger than a strict whole one).
  static bool PipelinesPartitioned(const ReadyTransaction& ready);
  // The batch path: partitioned candidates covered by evidence become whole transactions
  // (their staged chunks verified and merged into ready.envelope), see apply_partitioned.cpp.
  void MaterializePartitioned(size_t candidates, const std::vector<Evidence>& evidence);
  Result<Envelope> StagedEnvelope(const ReadyTransaction& ready, const std::map<uint32_t, std::string>& staged,
                                  bool defect);
  std::map<uint32_t, uint64_t> partition_evidence_;  // the partitions' checkpoints as last read

  // ---- apply_early.cpp: a chunked transaction applied while the relay writes it ------------
  // Whether `record` belongs to the transaction applied early (its chunks, manifest, marker).
  bool EarlyFrame(const log::LogRecord& record) const;
  // A chunk the barrier accepted: staged into the early transaction (started at seq 0 when
  // allowed), or kept in the chunk cache for the one-at-a-time path as before.
  void EarlyChunk(uint64_t offset, Chunk&& chunk);
  bool StartEarly(const TxIdentity& tx, uint32_t seq);
  // ROLLBACK of the early transaction (no-op when none): it is applied at its marker instead.
  void AbandonEarly(const std::string& why);
  // Counts and reports an abandoned early attempt (its target transaction already ended).
  void EarlyAbandoned(const TxIdentity& tx, const std::string& why);
  // At the transaction's CommitMarker: COMMIT when every chunk of `ready` was staged; false when
  // there was no early attempt or it was abandoned (the one-at-a-time path applies it).
  bool FinishEarly(const ReadyTransaction& ready);

  // ---- apply_pipeline.cpp: batches of whole transactions --------------------------------
  Admission Classify(PipelineTx& tx, const Evidence& evidence);
  void SendBatch();
  void CollectBatch();
  void RefuseSupersededUpdates(const PgResult& refusal);
  void DefectAckEverythingRead();
  void Counted(const PipelineTx& tx);
  Outcome Pump(bool drain);

  // ---- apply_snapshot.cpp: the snapshot handoff rule and holds --------------------------
  void LoadRegistry();
  void PollRegistry();
  bool UnderSnapshot(const Change& change, const std::vector<RelationInfo>& relations, uint64_t commit_lsn);
  ChunkView ViewOf(SnapshotTable& table, int32_t chunk_no);
  void ReadChunkState(SnapshotTable& table, int32_t chunk_no);
  RowAction WithSnapshotDefects(RowAction action, const std::optional<ChunkView>& old_view,
                                const std::optional<ChunkView>& new_view, const TxIdentity& tx);
  SnapshotRewrite RewriteForSnapshot(const Change& change, const std::vector<RelationInfo>& relations,
                                     const TxIdentity& tx, bool in_transaction);
  bool StopAtHolds(std::optional<uint64_t> next_commit_lsn);
  void Retired(uint64_t commit_lsn, int64_t commit_time_us) {
    if (commit_lsn >= applied_lsn_) last_commit_time_us_ = commit_time_us;
    applied_lsn_ = std::max(applied_lsn_, commit_lsn);
  }

  // ---- apply_metrics.cpp: the metrics endpoint ([metrics] listen) -------------------
  // Hands the server a snapshot of the counters in `state`: at most every kMetricsPublishInterval
  // unless `force` (a state change). A no-op without [metrics] listen.
  void PublishMetrics(metrics::ApplyState state, bool force);
  // Re-reads the flow's unresolved quarantine rows on the target (quarantine_open), when metrics
  // are served and the session is connected.
  void ReadQuarantineOpen();

  FlowConfig config_;
  bool until_caught_up_;
  std::unique_ptr<log::LogDevice> device_;
  std::unique_ptr<log::ConsumerLock> log_lock_;
  ApplySession session_;
  PgConnection* conn_ = nullptr;  // session_'s connection, once connected
  std::unique_ptr<log::LogReader> reader_;
  std::unique_ptr<LogDirWatch> log_watch_;  // a local log: woken by the relay's writes (kit/log_watch.h)
  std::unique_ptr<log::LogDevice> receiver_device_;    // the receiver's own io_uring ring (its thread's)
  std::unique_ptr<broker::StreamReceiver> receiver_;  // [transport] kind = "nats": feeds the replica
  std::unique_ptr<log::LogReader> chunk_reader_;
  TransactionBarrier barrier_;
  Counters counters_;
  uint64_t batches_ = 0;  // pipeline segments sent (shown as batches=)
  // Whole transactions read and not yet retired, the batch rules and the consumer offset (core).
  ApplyPipeline pipeline_{0, PipelineLimits{kBatchMaxTransactions, kBatchMaxStatements}};
  std::vector<Expect> expects_;     // the answers the in-flight batch owes
  // Superseded updates (docs/apply.md "Superseded updates in a group"): the relations the in-flight
  // group writes when it left UPDATEs out (its guard's argument, in order), and those whose target
  // fires triggers or rules for replicated changes (the guard refused them): no UPDATE of those,
  // and none across a write of those, is left out.
  std::vector<std::string> guarded_relations_;
  std::set<std::string> replica_triggers_;
  // Merged statements (docs/apply.md "Merged statements in a group"): the target's answer
  // (trellara.batch_column_types) per UPDATE statement shape, asked before the first group that would
  // merge it and kept until a group fails or a transaction goes alone; nullopt: not batchable.
  std::map<std::string, std::optional<std::vector<std::string>>> group_update_types_;
  std::set<std::string> GroupUpdateShapes(const std::vector<const std::vector<ChangePlan>*>& group,
                                          const std::vector<std::vector<bool>>& superseded);
  // Chunks of the chunked transaction being read, as the barrier verified them (ResumeLog sets the
  // barrier's sink; cleared once the transaction is handled). A chunk past the bound is re-read.
  static constexpr uint64_t kChunkCacheBytes = 16u << 20;
  VerifiedChunkCache chunk_cache_{kChunkCacheBytes};
  // Chunks the barrier accepted while feeding the current frame (its sink), handed on after Feed.
  std::vector<std::pair<uint64_t, Chunk>> accepted_chunks_;
  // The chunked transaction applied early (apply_early.cpp): the target transaction is open while
  // `active`; `offsets` are the log offsets of its chunks staged so far, chunk i at offsets[i].
  // It is abandoned after config_.early_apply_idle without a record ([apply] early_apply_idle).
  struct Early {
    EarlyAttempt attempt;
    Evidence evidence;
    Clock::time_point last_frame;
  };
  Early early_;
  PlanCache plan_cache_;  // each relation's quoted names, made once for the batch path's plans
  uint64_t start_offset_ = 0;
  uint64_t stop_offset_ = UINT64_MAX;  // --until-caught-up: the log's published end at start
  uint64_t written_offset_ = 0;  // what consumers/applier holds
  uint64_t unwritten_transactions_ = 0;
  Clock::time_point last_offset_write_;
  ApplyProgress progress_;
  // Retries: the backoff, the series of failures it counts, and the progress
  // figure at the last failure (progress since then starts a new series).
  RetryBackoff backoff_;
  std::string retry_since_;
  uint64_t done_at_last_failure_ = UINT64_MAX;
  bool flow_checked_ = false;  // a record of the log was found to be this flow's
  // The snapshot registry (apply_snapshot.h), loaded at session start and whenever it moved.
  SnapshotRegistry registry_;
  // Chunks read pending FOR SHARE in the open target transaction (still pending until it ends).
  std::set<std::pair<const SnapshotTable*, int32_t>> pending_locked_;
  // The one-at-a-time attempt in flight: replayed after the operator marked it replay-ready (drift
  // and DDL are then decided as docs/schema-changes.md says), and what its DDL changes did, counted
  // and logged only once its COMMIT succeeded.
  bool replay_ready_ = false;
  uint64_t attempt_ddl_applied_ = 0;
  uint64_t attempt_batched_updates_ = 0;  // UPDATEs of this attempt sent in batches (apply_chunked.cpp)
  uint64_t attempt_ddl_no_target_change_ = 0;
  std::vector<std::string> attempt_ddl_notes_;
  std::set<uint32_t> attempt_created_ahead_;  // tables CreateAhead created: their CREATE is left out where it comes
  bool attempt_registry_changed_ = false;  // a DDL withheld a snapshot handoff: reload after COMMIT
  // The chunked transaction being staged (apply_chunked.cpp): the INSERT run not yet sent (at most
  // kCopyRunRowsMin plans) or the COPY in progress, and the pipelined statements awaiting answers.
  struct ChunkedStage {
    std::string run_key;                 // statement_key of the current INSERT run ("" none)
    std::vector<ChangePlan> run_rows;    // the run's rows while it is shorter than kCopyRunRowsMin
    uint32_t run_oid = 0;                // the run's relation and definition (its statement_key's)
    Sha256 run_fingerprint{};
    std::string copy_sql;                // the run's COPY statement
    bool copying = false;                // a COPY FROM STDIN is open for the run
    ChangePlan copy_plan;                // the run's first row (relation, kind) for a failure's cause
    uint64_t copy_rows = 0;              // rows sent in the open COPY
    std::string copy_buffer;             // COPY rows not yet handed to libpq
    // The UPDATE run (core UpdateBatchable plans of one statement_key, distinct row keys), sent as
    // one statement (SendUpdateBatch) once it has kUpdateBatchRowsMin rows, or one by one if shorter.
    std::string update_key;                         // "" none
    std::vector<ChangePlan> update_rows;
    std::unordered_set<std::string> update_row_keys;
    size_t update_bytes = 0;
    // The target's answer per statement_key, asked once per transaction: the cast type of each
    // parameter column, or nullopt when that relation's UPDATEs must go one at a time.
    std::map<std::string, std::optional<std::vector<std::string>>> update_types;
    bool piped = false;                  // the connection is in pipeline mode
    struct Piped {
      ChangePlan plan;  // without sql and params (sent); what a failure's cause names
      bool prepare = false;
      std::vector<std::string> batch_matches;  // an UPDATE batch: each row's match, in batch order
    };
    std::vector<Piped> piped_statements;  // in the order of their answers
    size_t piped_rows = 0;                // statements (not Parses) in the segment
    size_t piped_bytes = 0;
  } chunked_;
  uint64_t applied_lsn_ = 0;  // the highest commit LSN the target holds (origin progress, then retired)
  uint64_t covered_lsn_ = 0;  // the LSN of the last transaction end or progress marker read
  bool timeline_checked_ = false;  // CheckTimeline found a TIMELINE (a broker replica may get one later)
  // Metrics (docs/apply.md "Metrics"): the server, and the figures Counters does not hold.
  Published<metrics::ApplySnapshot> metrics_snapshot_;  // what metrics_ serves (before it: outlives it)
  std::unique_ptr<MetricsServer> metrics_;
  Clock::time_point last_metrics_publish_{};
  int64_t last_commit_time_us_ = 0;  // source commit time of the transaction at applied_lsn_
  uint64_t retries_ = 0;
  uint64_t quarantined_ = 0;
  uint64_t quarantine_open_ = 0;
  double offset_written_unix_seconds_ = 0;
};

}  // namespace trellara::cli::apply
