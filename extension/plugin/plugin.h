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

// The source transaction being decoded in this process, for the relay's error handling: when an
// ERROR ends decoding, it names the transaction (and the relation of the change in progress).
struct DecodingTransaction {
  bool open;            // between begin and the end of commit of a transaction being emitted
  uint32_t xid;
  uint64_t commit_lsn;
  char relation[130];   // "schema.name" of the last row change seen, or ""
};
const DecodingTransaction& CurrentTransaction();

// For a process that only decodes (the relay worker): pins the settings that shape type output
// (DateStyle, IntervalStyle, extra_float_digits, bytea_output, TimeZone, search_path) once, at
// PGC_S_OVERRIDE, instead of around every transaction. Plain C calls: may raise ERROR.
void PinOutputSettingsForProcess();

// Registers the plugin's GUCs (trellara.chunk_changes, trellara.chunk_bytes,
// trellara.record_bytes_max); called once from _PG_init.
void DefineGucs();

}  // namespace trellara::plugin
