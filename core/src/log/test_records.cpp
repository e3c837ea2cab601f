// test_records.cpp — deterministic test record content (test_records.h). Must stay a pure
// function of its inputs: crash tests compare against it across processes.
#include "trellara/log/test_records.h"

#include <algorithm>

#include "trellara/log/format.h"

namespace trellara::log {
namespace {

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

std::vector<uint8_t> MakeTestRecord(uint64_t seed, uint64_t offset, size_t bytes) {
  bytes = std::max(bytes, kTestRecordBytesMin);
  std::vector<uint8_t> out(bytes);
  PutU64(out.data(), seed);
  PutU64(out.data() + 8, offset);
  PutU32(out.data() + 16, static_cast<uint32_t>(bytes));
  uint64_t state = seed * 0x100000001B3ull ^ offset;
  for (size_t i = kTestRecordBytesMin; i < bytes; i += 8) {
    uint64_t word = SplitMix64(state);
    for (size_t j = 0; j < 8 && i + j < bytes; ++j) out[i + j] = static_cast<uint8_t>(word >> (8 * j));
  }
  return out;
}

bool TestRecordMatches(uint64_t seed, uint64_t offset, std::span<const uint8_t> payload) {
  if (payload.size() < kTestRecordBytesMin) return false;
  auto expected = MakeTestRecord(seed, offset, payload.size());
  return std::equal(expected.begin(), expected.end(), payload.begin(), payload.end());
}

}  // namespace trellara::log
