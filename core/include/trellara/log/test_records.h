// test_records.h — the deterministic records `trellara log write-test` appends and `verify-test`
// checks: content is a pure function of (seed, offset, length), so a verifier needs only the
// seed. Used by CLI test commands, crash tests and benchmarks; never by the product's data path.
//
// Payload layout: u64 seed, u64 offset, u32 payload length, then bytes from a SplitMix64 stream
// keyed by (seed, offset). Minimum length 20 bytes.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace trellara::log {

inline constexpr size_t kTestRecordBytesMin = 20;

std::vector<uint8_t> MakeTestRecord(uint64_t seed, uint64_t offset, size_t bytes);
// The commit LSN write-test gives the record at `offset` (increasing with the offset).
inline uint64_t TestRecordCommitLsn(uint64_t offset) { return 0x1000000 + offset * 64; }
// True when `payload` is exactly what MakeTestRecord(seed, offset, payload.size()) produces.
bool TestRecordMatches(uint64_t seed, uint64_t offset, std::span<const uint8_t> payload);

}  // namespace trellara::log
