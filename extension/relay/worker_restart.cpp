// relay/worker_restart.cpp — the relay worker's start on its log: opens the log (io_uring device,
// writer, spill store) and applies core's restart rule (DecideRestart) to the durable tail, the
// slot's confirmed position and the catalog's log_started_lsn: what the log covers, or a refusal.
// It must never confirm the slot or let a log that covers less than the slot run (a hole).
extern "C" {
#include "postgres.h"
}

#include <memory>
#include <string>
#include <vector>

#include "pg/guard.h"
#include "relay/relay.h"
#include "relay/worker_internal.h"
#include "trellara/capture/relay_progress.h"
#include "trellara/capture/stream_spill.h"
#include "trellara/log/reader.h"
#include "trellara/log/uring_device.h"
#include "trellara/log/writer.h"

namespace trellara::relay::worker {

namespace {

// The durable frames from the tail backwards to the last completing one (the restart rule's input).
std::vector<TailFrame> ReadTailFrames() {
  std::vector<TailFrame> frames;
  log::DurableTail tail = g_relay->writer->durable_tail();
  if (!tail.offset) return frames;
  auto reader = log::LogReader::Open(*g_relay->device, log_directory);
  if (!reader.ok()) Fail("cannot read its log " + std::string(log_directory), reader.error());
  for (uint64_t o = *tail.offset + 1; o-- > 0;) {
    StopIfRequested();
    Status s = (*reader)->Seek(o);
    if (!s.ok()) break;  // reclaimed: the log starts after this offset
    auto rec = (*reader)->Next();
    if (!rec.ok()) Fail("cannot read offset " + std::to_string(o) + " of its log", rec.error());
    if (!rec->has_value()) break;
    frames.push_back(TailFrame{o, (*rec)->type, (*rec)->commit_lsn});
    if (CompletesTransaction((*rec)->type)) break;
    if (o == 0) break;
  }
  return frames;
}

}  // namespace

void OpenLog() {
  g_relay = new Relay();
  auto device = log::OpenUringDevice();
  if (!device.ok()) Fail("cannot set up io_uring", device.error());
  g_relay->device = std::move(*device);
  log::WriterOptions writer_options;
  writer_options.segment_bytes_max = LogSegmentBytes();  // trellara.log_segment_size, read at start
  auto writer = log::LogWriter::Open(*g_relay->device, log_directory, writer_options);
  if (!writer.ok())
    Fail("cannot open its log directory " + std::string(log_directory), writer.error(),
         "Check that the directory is writable by the postgres OS user and not used by another flow.");
  g_relay->writer = std::move(*writer);
  SpillOptions spill_options;
  spill_options.directory = StreamSpillDirectory()[0] == '\0'
                                ? std::string(log_directory) + "/spill"
                                : std::string(StreamSpillDirectory()) + "/" + flow_name;
  spill_options.memory_changes = StreamSpillChanges();
  auto spill = StreamSpill::Open(spill_options);
  if (!spill.ok())
    Fail("cannot open its spill directory " + spill_options.directory, spill.error(),
         "Check that the directory (trellara.stream_spill_directory) is writable by the postgres OS user.");
  g_relay->spill = std::move(*spill);
  if (g_relay->spill->removed_at_open() > 0)
    pg::CallPostgres([] {
      ereport(LOG, (errmsg("trellara relay of flow \"%s\": removed %llu spill file(s) of streamed transactions left by "
                           "its previous run; the slot decodes them again",
                           flow_name, static_cast<unsigned long long>(g_relay->spill->removed_at_open()))));
    });
}

// The restart rule (core DecideRestart) applied at start. Returns the LSN to skip through, or sets
// `refusal` to the reason (and returns 0) when the flow must not run.
uint64_t ApplyRestartRule(uint64_t slot_confirmed, std::string* refusal, bool* log_started_now) {
  LogStartRecord start;
  if (has_log_started_lsn) start.started_lsn = log_started_lsn;
  RestartDecision d = DecideRestart(ReadTailFrames(), slot_confirmed, start, flow_name);
  *log_started_now = false;
  switch (d.kind) {
    case RestartDecision::Kind::kRefuse:
      *refusal = d.reason + " HINT: " + d.remedy;
      return 0;
    case RestartDecision::Kind::kFreshLog:
      // The first frame of a new log: a start marker at the slot's position, so the log covers
      // what the slot has confirmed from its very first moment.
      g_relay->ack = std::make_unique<AckTracker>(0);
      if (source_ack != SourceAck::kLocal) g_relay->held_ack = std::make_unique<AckTracker>(0);
      (void)AppendProgressMarker(slot_confirmed);
      *log_started_now = true;
      return slot_confirmed;
    case RestartDecision::Kind::kResume:
      g_relay->ack = std::make_unique<AckTracker>(d.covered_lsn);
      // What the log holds beyond the slot may not be with the broker (or on the targets) yet:
      // from the slot on.
      if (source_ack != SourceAck::kLocal) g_relay->held_ack = std::make_unique<AckTracker>(slot_confirmed);
      if (d.torn_commit_lsn.has_value())
        pg::CallPostgres([&] {
          ereport(LOG, (errmsg("trellara relay of flow \"%s\": the log ends with %llu frame(s) of the transaction "
                               "committed at %X/%X without its commit marker; it is decoded and written again in full",
                               flow_name, static_cast<unsigned long long>(d.torn_frames),
                               LSN_ARGS(*d.torn_commit_lsn))));
        });
      return d.skip_through_lsn;
  }
  return 0;
}

}  // namespace trellara::relay::worker
