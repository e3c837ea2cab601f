// partitioned_log.cpp — see partitioned_log.h.
#include "commands/partitioned_log.h"

#include "kit/errors.h"
#include "trellara/log/barrier.h"
#include "trellara/log/consumer_offsets.h"
#include "trellara/log/reader.h"
#include "trellara/log/uring_device.h"

namespace trellara::cli {

PendingLog ReadPendingLog(const FlowConfig& config, uint64_t visible_lsn) {
  auto device = log::OpenUringDevice();
  if (!device) throw CommandFailed("cannot open io_uring: " + device.error().message, kExitCouldNotRead);
  auto reader = log::LogReader::Open(**device, config.log_directory);
  if (!reader)
    throw CommandFailed("cannot open the log of flow " + config.flow_name + " at " + config.log_directory + ": " +
                            reader.error().message,
                        kExitCouldNotRead);
  if (auto offsets = log::ReadConsumerOffsets(**device, config.log_directory)) {
    auto it = offsets->find(log::kApplierConsumer);
    if (it != offsets->end()) (void)(*reader)->Seek(it->second);
  }
  PendingLog pending;
  TransactionBarrier barrier;
  for (;;) {
    auto next = (*reader)->Next();
    if (!next) {
      pending.problem = next.error().message;
      break;
    }
    if (!next->has_value()) break;
    const log::LogRecord& record = **next;
    auto fed = barrier.Feed(LogFrame{record.offset, record.type, record.commit_lsn,
                                     std::span<const uint8_t>(record.payload.data(), record.payload.size())});
    if (!fed) {
      pending.problem = fed.error().message;  // the appliers report it too, and halt there
      break;
    }
    if (!fed->has_value()) continue;
    const ReadyTransaction& ready = **fed;
    pending.last_commit_lsn = std::max(pending.last_commit_lsn, ready.tx.commit_lsn);
    if (ready.tx.commit_lsn > visible_lsn && ready.partitioned())
      pending.partitioned.push_back({ready.tx.commit_lsn, partition::ListedPartitions(ready.manifest->chunks)});
  }
  return pending;
}

}  // namespace trellara::cli
