// log_record_view.h — what the CLI says about one frame of a flow log: its type name, the LSN a
// progress marker carries, and reading the frame at a given offset.
//
// Shared by `inspect-transaction --dir/--offset` and `log records`. It only reads (through
// core's LogReader, which returns durable, CRC-checked frames) and never judges a record beyond
// what core decides; every failure is a CommandFailed naming the directory and offset.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "commands/commands.h"
#include "trellara/log/device.h"
#include "trellara/log/reader.h"

namespace trellara::cli {

// "envelope", "chunk", "manifest", "commit_marker", "progress", "test", or "unknown(<n>)".
std::string FrameTypeName(uint8_t frame_type);

// Whether a frame holds a transaction record (Envelope, Chunk, Manifest, CommitMarker), the record
// types core's codec decodes.
bool IsTransactionRecordType(uint8_t frame_type);

// The LSN stored in a progress marker's 8-byte little-endian payload; nullopt if malformed.
std::optional<uint64_t> ProgressMarkerLsn(const log::LogRecord& record);

// The real device; a CommandFailed if io_uring cannot be set up.
std::unique_ptr<log::LogDevice> OpenLogDeviceForReading();

// Opens `dir` for reading, refusing a missing directory with a message naming it.
std::unique_ptr<log::LogReader> OpenLogForReading(log::LogDevice& device, const std::string& dir);

// The durable frame at `offset` of `dir`; CommandFailed (exit 2) naming dir and offset when the
// offset is reclaimed or past the durable end, exit 1 when the frame cannot be read.
log::LogRecord ReadFrameAt(log::LogDevice& device, const std::string& dir, uint64_t offset);

}  // namespace trellara::cli
