// world_relay.cpp — the simulated relay: capture into the log, confirm the slot, crashes and power loss (world_internal.h).
#include "world_internal.h"

namespace trellara::sim::world_detail {

// ---------------------------------------------------------------------------------------------
// relay

std::vector<log::LogRecord> World::ReadWholeLog() {
  std::vector<log::LogRecord> records;
  auto reader = log::LogReader::Open(device_, kLogDir);
  if (!reader.ok()) {
    out_.harness_error = "log reader open failed: " + reader.error().message;
    return records;
  }
  for (;;) {
    auto next = (*reader)->Next();
    if (!next.ok()) {
      out_.harness_error = "log read failed: " + next.error().message;
      return records;
    }
    if (!next->has_value()) break;
    records.push_back(std::move(**next));
  }
  return records;
}

void World::RelayStart() {
  log::WriterOptions options;
  options.segment_bytes_max = 4096 + random_() % 4096;
  log::RecoveryReport report;
  auto writer = log::LogWriter::Open(device_, kLogDir, options, &report);
  if (!writer.ok()) {
    // Recovery refuses a log whose acknowledged frames are damaged (never skips past them): the
    // flow stops, and what the slot confirmed is no longer held anywhere.
    Trace("relay cannot open its log: " + writer.error().message);
    Violate("no_acknowledged_transaction_lost", "log recovery refuses the log: " + writer.error().message);
    relay_refused_ = true;
    return;
  }
  log_recovered_ = true;
  writer_ = std::move(*writer);
  appended_.clear();
  std::vector<log::LogRecord> records = ReadWholeLog();
  if (!out_.harness_error.empty()) {
    // The reader refuses a damaged acknowledged frame (never skips it): the flow stops.
    Violate("no_acknowledged_transaction_lost", "the recovered log cannot be read: " + out_.harness_error);
    out_.harness_error.clear();
    relay_refused_ = true;
    writer_.reset();
    return;
  }
  for (const auto& r : records) appended_[r.offset] = {r.type, r.commit_lsn};
  std::vector<TailFrame> newest_first;
  for (auto it = records.rbegin(); it != records.rend(); ++it) {
    newest_first.push_back({it->offset, it->type, it->commit_lsn});
    if (CompletesTransaction(it->type)) break;
  }
  RestartDecision d = DecideRestart(newest_first, slot_confirmed_, log_start_, kFlow);
  if (d.kind == RestartDecision::Kind::kRefuse) {
    Trace("relay refuses to start: " + d.reason);
    relay_refused_ = true;
    writer_.reset();
    return;
  }
  ack_ = std::make_unique<AckTracker>(d.covered_lsn);
  // source_ack = broker_quorum: what the log holds beyond the slot may not be with the broker yet.
  if (config_.broker_quorum)
    broker_ack_ = std::make_unique<AckTracker>(d.kind == RestartDecision::Kind::kFreshLog ? 0 : slot_confirmed_);
  if (d.kind == RestartDecision::Kind::kFreshLog) {
    std::string payload(8, '\0');
    for (int i = 0; i < 8; ++i) payload[i] = static_cast<char>((slot_confirmed_ >> (8 * i)) & 0xff);
    AppendFrame(kProgressRecordType, slot_confirmed_, payload, kProgressRecordType);
    auto durable = writer_->Flush();
    if (!durable.ok()) {
      out_.harness_error = "relay: start marker flush failed: " + durable.error().message;
      return;
    }
    (void)ack_->Durable(*durable);
    log_start_.started_lsn = slot_confirmed_;
    decode_after_ = slot_confirmed_;
  } else {
    decode_after_ = std::max(d.skip_through_lsn, slot_confirmed_);
  }
  Trace("relay starts: " + std::string(d.kind == RestartDecision::Kind::kFreshLog ? "fresh log" : "resume") +
        ", covered " + Lsn(d.covered_lsn) + ", decoding after " + Lsn(decode_after_) +
        (d.torn_commit_lsn ? ", torn chunked tail at " + Lsn(*d.torn_commit_lsn) : "") + ", " +
        std::to_string(report.torn_tail_bytes) + " torn bytes truncated");
  relay_running_ = true;
}

void World::AppendFrame(uint8_t type, uint64_t commit_lsn, const std::string& bytes, uint8_t ack_type) {
  auto offset = writer_->Append(type, commit_lsn,
                                std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  if (!offset.ok()) {
    out_.harness_error = "relay: append failed: " + offset.error().message;
    return;
  }
  appended_[*offset] = {type, commit_lsn};
  ack_->Appended(*offset, ack_type, commit_lsn);
  if (broker_ack_) broker_ack_->Appended(*offset, ack_type, commit_lsn);
  if (CompletesTransaction(ack_type) && Defect("relay_confirm_before_fsync")) Confirm(commit_lsn);
}

void World::Confirm(uint64_t lsn) {
  // source_confirmed_only_to_durable_log, checked at the moment of the confirm too: after the step
  // the frames may have become durable, hiding a confirm that raced ahead of the fsync.
  if (writer_ && lsn > slot_confirmed_) {
    bool durable = false;
    for (const auto& [off, meta] : appended_)
      if (off < writer_->durable_end() && CompletesTransaction(meta.first) && meta.second >= lsn) durable = true;
    if (!durable)
      Violate("source_confirmed_only_to_durable_log",
              "the relay confirms " + Lsn(lsn) + " to the source while its completing frame is not durable (durable end " +
                  std::to_string(writer_->durable_end()) + ")");
  }
  if (lsn > slot_confirmed_) {
    Trace("source slot confirmed to " + Lsn(lsn));
    slot_confirmed_ = lsn;
  }
}

void World::PowerLoss(const std::string& why) {
  Trace("POWER LOSS on the log host (" + why + "): relay and applier die");
  device_.PowerLoss();
  out_.power_losses++;
  log_recovered_ = false;  // readers wait until the relay's recovery made the log consistent
  writer_.reset();
  relay_running_ = false;
  if (hop_) {
    hop_->ForwarderCrash("its host lost power");  // the remote applier runs on another host
    return;
  }
  applier_running_ = false;
  reader_.reset();
  barrier_.reset();
  chunk_cache_.reset();
  pipeline_.reset();
}

void World::RelayStep() {
  if (relay_refused_) return;
  if (!relay_running_) {
    RelayStart();
    return;
  }
  const SourceTx* next = nullptr;
  for (const auto& s : source_)
    if (s.commit_lsn > decode_after_) {
      next = &s;
      break;
    }
  if (next == nullptr) {  // caught up with the source
    if (broker_ack_) Confirm(Confirmable(ack_->confirmable_lsn()));
    return;
  }
  // Decode: the real assembler turns the changes into records.
  TransactionAssembler::Options options;
  options.flow = kFlow;
  options.origin_sysid = kSysid;
  options.chunk_changes = 4;
  TransactionAssembler assembler(options);
  RelationInfo events = EventsRelation();
  struct Out {
    RecordType type;
    bool completes;
    std::string bytes;
  };
  std::vector<Out> records;
  RecordSink sink = [&records](const EmittedRecord& r) -> Status {
    records.push_back({r.type, r.completes_transaction, r.bytes});
    return Status::Ok();
  };
  assembler.Begin(next->xid, next->commit_lsn - 0x80, next->commit_lsn, 1000 + next->xid);
  for (int k = 0; k < next->changes; ++k) {
    Change c;
    c.op = Op::Insert;
    c.relation_oid = kEventsOid;
    c.new_tuple = {Value::Text(std::to_string(next->commit_lsn)), Value::Text(std::to_string(k)),
                   Value::Text("xid " + std::to_string(next->xid) + " change " + std::to_string(k))};
    Status s = assembler.AddChange(std::move(c), &events, {}, sink);
    if (!s.ok()) {
      out_.harness_error = "assembler: " + s.error().message;
      return;
    }
  }
  Status s = assembler.Commit(sink);
  if (!s.ok()) {
    out_.harness_error = "assembler commit: " + s.error().message;
    return;
  }
  const bool chunked = records.size() > 1;
  Trace("relay decoded xid " + std::to_string(next->xid) + " commit " + Lsn(next->commit_lsn) + ": " +
        std::to_string(records.size()) + (chunked ? " records (chunked)" : " record"));
  if (Fire("relay.crash_before_append")) return RelayCrash("before append");

  // The transport between the assembler and the log: duplicates, reordering, drops.
  if (chunked && Fire("transport.manifest_before_chunks")) {
    auto manifest = std::find_if(records.begin(), records.end(), [](const Out& o) { return o.type == RecordType::Manifest; });
    Out m = *manifest;
    records.erase(manifest);
    records.insert(records.begin(), m);
  }
  if (chunked && Fire("transport.drop_chunk")) {
    auto second = std::find_if(records.begin(), records.end(), [](const Out& o) { return o.type == RecordType::Chunk; });
    if (second != records.end()) ++second;
    if (second != records.end() && second->type == RecordType::Chunk) records.erase(second);
  }
  if (!chunked && Fire("transport.duplicate_record")) records.push_back(records.back());

  if (chunked) {
    // Chunks first, each group made durable (the relay flushes as chunks leave the assembler).
    size_t i = 0;
    for (; i < records.size() && records[i].type != RecordType::CommitMarker; ++i) {
      uint8_t type = static_cast<uint8_t>(records[i].type);
      uint8_t ack_type = type;
      if (records[i].type == RecordType::Manifest && Defect("relay_confirm_at_manifest"))
        ack_type = static_cast<uint8_t>(RecordType::CommitMarker);
      AppendFrame(type, next->commit_lsn, records[i].bytes, ack_type);
      if (!out_.harness_error.empty()) return;
      if (records[i].type == RecordType::Chunk && i >= 1 && Fire("relay.power_loss_mid_chunks"))
        return PowerLoss("after chunk " + std::to_string(i) + " was appended");
      bool last_chunk = records[i].type == RecordType::Chunk &&
                        (i + 1 >= records.size() || records[i + 1].type != RecordType::Chunk);
      if (last_chunk || records[i].type == RecordType::Manifest) {
        auto durable = writer_->Flush();
        if (!durable.ok()) {
          out_.harness_error = "relay flush: " + durable.error().message;
          return;
        }
        Confirm(Confirmable(ack_->Durable(*durable)));
      }
      if (last_chunk && Fire("relay.crash_after_chunks_before_manifest"))
        return RelayCrash("chunks durable, manifest not written");
      if (records[i].type == RecordType::Manifest && i + 1 < records.size() &&
          records[i + 1].type == RecordType::CommitMarker && Fire("relay.crash_after_manifest_before_marker"))
        return RelayCrash("manifest durable, commit marker not written");
    }
    for (; i < records.size(); ++i) AppendFrame(static_cast<uint8_t>(records[i].type), next->commit_lsn, records[i].bytes,
                                                static_cast<uint8_t>(records[i].type));
  } else {
    for (const auto& r : records) AppendFrame(static_cast<uint8_t>(r.type), next->commit_lsn, r.bytes, static_cast<uint8_t>(r.type));
  }
  if (!out_.harness_error.empty()) return;
  Status submitted = writer_->Submit();
  if (!submitted.ok()) {
    out_.harness_error = "relay submit: " + submitted.error().message;
    return;
  }
  if (Fire("relay.power_loss_after_append")) return PowerLoss("frames appended and submitted, fsync not complete");
  auto durable = writer_->Flush();
  if (!durable.ok()) {
    out_.harness_error = "relay flush: " + durable.error().message;
    return;
  }
  decode_after_ = next->commit_lsn;
  uint64_t confirmable = Confirmable(ack_->Durable(*durable));
  if (Fire("relay.crash_after_fsync_before_confirm")) return RelayCrash("durable, not confirmed");
  if (Fire("relay.confirm_lost")) {
    Trace("confirm of " + Lsn(confirmable) + " lost; the relay reconnects");
    writer_.reset();
    relay_running_ = false;
    return;
  }
  Confirm(confirmable);
}


}  // namespace trellara::sim::world_detail
