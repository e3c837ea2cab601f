// plugin/plugin.h — what the `trellara` output plugin tells the process that drives it.
//
// The relay worker drives decoding in its own process and receives the plugin's bytes through its
// write callback; the frame header it writes needs facts the bytes only imply. The plugin records
// them here just before each OutputPluginWrite. Plain data only (no constructors in the .so).
#pragma once

#include <cstdint>

namespace trellara::plugin {

struct WrittenRecord {
  uint8_t record_type;        // trellara::RecordType of the bytes being written
  bool completes_transaction;  // Envelope or CommitMarker
  uint32_t xid;
  uint64_t commit_lsn;        // end LSN of the source commit record (the slot confirm position)
};

// Facts about the record whose bytes are in the current OutputPluginWrite call.
const WrittenRecord& LastWrittenRecord();

// Registers the plugin's GUCs (trellara.chunk_changes); called once from _PG_init.
void DefineGucs();

}  // namespace trellara::plugin
