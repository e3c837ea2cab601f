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

// For a process that only decodes (the relay worker): pins the settings that shape type output
// (DateStyle, IntervalStyle, extra_float_digits, bytea_output, TimeZone, search_path) once, at
// PGC_S_OVERRIDE, instead of around every transaction. Plain C calls: may raise ERROR.
void PinOutputSettingsForProcess();

// Registers the plugin's GUCs (trellara.chunk_changes); called once from _PG_init.
void DefineGucs();

}  // namespace trellara::plugin
