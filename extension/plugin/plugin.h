// plugin/plugin.h — what the `trellara` output plugin tells the process that drives it.
//
// The relay worker drives decoding in its own process and receives the plugin's bytes through its
// write callback; the frame header it writes needs facts the bytes only imply. The plugin records
// them here just before each OutputPluginWrite. Plain data only (no constructors in the .so).
#pragma once

#include <cstdint>

#include "trellara/capture/assembler.h"

namespace trellara::plugin {

// Stream records (never log records; outside trellara::RecordType): with the `streaming` option,
// a transaction PostgreSQL streams while in progress reaches the writer as these, and the writer
// (the relay) keeps them in its spill store (core stream_spill.h) until the commit.
//   change: bytes = a stream record (EncodeStreamRecord); `xid` = the (sub)transaction it belongs
//           to, `top_xid` its top transaction.
//   abort:  no bytes; `xid` aborted: the whole transaction when xid == top_xid, else exactly that
//           subtransaction's records.
//   commit: no bytes; top_xid committed with commit_lsn (end of its commit record), begin_lsn and
//           commit_time_us: the writer assembles and logs it now.
inline constexpr uint8_t kStreamChangeRecord = 0x81;
inline constexpr uint8_t kStreamAbortRecord = 0x82;
inline constexpr uint8_t kStreamCommitRecord = 0x83;

struct WrittenRecord {
  uint8_t record_type;        // trellara::RecordType of the bytes being written, or a stream record type
  bool completes_transaction;  // Envelope or CommitMarker
  uint32_t xid;
  uint64_t commit_lsn;        // end LSN of the source commit record (the slot confirm position)
  uint32_t top_xid;           // stream records only
  uint64_t begin_lsn;         // stream commit only
  int64_t commit_time_us;     // stream commit only
};

// The assembler options of the decoding session running in this process (flow, system
// identifier, chunk bounds): a streamed transaction is assembled by the relay with the same ones,
// so its records are the bytes the plugin would have written. False when no session is active.
bool CurrentAssemblerOptions(TransactionAssembler::Options* out);

// Facts about the record whose bytes are in the current OutputPluginWrite call.
const WrittenRecord& LastWrittenRecord();

// The source transaction being decoded in this process, for the relay's error handling: when an
// ERROR ends decoding, it names the transaction (and the relation of the change in progress).
struct DecodingTransaction {
  bool open;            // between begin and the end of commit of a transaction being emitted
  uint32_t xid;
  uint64_t commit_lsn;
  char relation[130];   // "schema.name" of the last row change seen, or ""
  // Which cache entry version `relation` was formatted from (0: none): a run of changes to one
  // relation formats its name once, not once per change.
  uint32_t relation_oid;
  uint64_t relation_invalidations;
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
