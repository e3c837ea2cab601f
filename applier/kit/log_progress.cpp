// log_progress.cpp — see log_progress.h.
#include "kit/log_progress.h"

#include "kit/errors.h"
#include "trellara/log/consumer_offsets.h"
#include "trellara/log/format.h"
#include "trellara/log/reader.h"
#include "trellara/log/uring_device.h"

namespace trellara::cli {

LogProgress ReadLogProgress(const FlowConfig& config) {
  const std::string where = "the log of flow " + config.flow_name + " at " + config.log_directory +
                            " (flow.log_directory in " + config.path + ")";
  auto device = log::OpenUringDevice();
  if (!device) throw CommandFailed("cannot open the log device for " + where + ": " + device.error().message);
  auto reader = log::LogReader::Open(**device, config.log_directory);
  if (!reader) throw CommandFailed("cannot open " + where + ": " + reader.error().message);
  auto offsets = log::ReadConsumerOffsets(**device, config.log_directory);
  if (!offsets) throw CommandFailed("cannot read the consumer offsets of " + where + ": " + offsets.error().message);
  LogProgress progress;
  if (auto it = offsets->find(log::kApplierConsumer); it != offsets->end()) {
    progress.consumer_offset = it->second;
    Status seek = (*reader)->Seek(it->second);
    if (!seek.ok())
      throw CommandFailed("cannot seek " + where + " to the applier's consumer offset " + std::to_string(it->second) +
                          ": " + seek.error().message);
  }
  progress.scanned_from = (*reader)->next_offset();
  for (;;) {
    auto next = (*reader)->Next();
    if (!next)
      throw CommandFailed("reading " + where + " at offset " + std::to_string((*reader)->next_offset()) +
                          " failed: " + next.error().message + "; run trellara log inspect on the directory");
    if (!*next) break;
    const log::LogRecord& record = **next;
    progress.lag_records++;
    progress.lag_bytes += log::kFrameHeaderBytes + record.payload.size();
    if (EndsTransaction(record.type) && record.commit_lsn > progress.last_commit_lsn)
      progress.last_commit_lsn = record.commit_lsn;
  }
  progress.end_offset = (*reader)->next_offset();
  return progress;
}

}  // namespace trellara::cli
