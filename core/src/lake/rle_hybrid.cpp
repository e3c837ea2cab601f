// rle_hybrid.cpp — the RLE / bit-packing hybrid encoder. It must never emit a bit-packed run whose
// value count is not a multiple of 8 anywhere but at the end, and never a value wider than
// bit_width (asserted: a level that does not fit is a writer bug, not a data error).
#include "trellara/lake/rle_hybrid.h"

#include <algorithm>
#include <string>

#include "trellara/base/assert.h"
#include "trellara/lake/thrift_compact.h"

namespace trellara::lake {

namespace rle_hybrid_internal {

constexpr size_t kGroupValues = 8;

// One bit-packed run of `values` (padded with zeros to a multiple of 8): header
// (groups << 1 | 1), then the values packed LSB first, bit_width bits each.
void PutBitPackedRun(std::span<const uint32_t> values, int bit_width, std::vector<uint8_t>& out) {
  const size_t groups = (values.size() + kGroupValues - 1) / kGroupValues;
  ThriftCompactWriter::PutVarint(out, (static_cast<uint64_t>(groups) << 1) | 1);
  uint64_t buffer = 0;
  int buffered_bits = 0;
  for (size_t i = 0; i < groups * kGroupValues; i++) {
    const uint64_t value = i < values.size() ? values[i] : 0;
    buffer |= value << buffered_bits;
    buffered_bits += bit_width;
    while (buffered_bits >= 8) {
      out.push_back(static_cast<uint8_t>(buffer));
      buffer >>= 8;
      buffered_bits -= 8;
    }
  }
  // groups * 8 * bit_width bits is a whole number of bytes.
  TRELLARA_ASSERT(buffered_bits == 0, "bit-packed run did not end on a byte boundary");
}

// One RLE run: header (count << 1), then the value in ceil(bit_width / 8) little-endian bytes.
void PutRleRun(uint32_t value, size_t count, int bit_width, std::vector<uint8_t>& out) {
  ThriftCompactWriter::PutVarint(out, static_cast<uint64_t>(count) << 1);
  const int value_bytes = (bit_width + 7) / 8;
  for (int b = 0; b < value_bytes; b++) out.push_back(static_cast<uint8_t>(value >> (8 * b)));
}

// Writes `pending` as bit-packed runs of at most kBitPackedGroupsPerRunMax groups each.
void FlushBitPacked(std::vector<uint32_t>& pending, int bit_width, std::vector<uint8_t>& out) {
  const size_t run_values_max = kBitPackedGroupsPerRunMax * kGroupValues;
  for (size_t begin = 0; begin < pending.size(); begin += run_values_max) {
    const size_t count = std::min(run_values_max, pending.size() - begin);
    PutBitPackedRun(std::span<const uint32_t>(pending).subspan(begin, count), bit_width, out);
  }
  pending.clear();
}

}  // namespace rle_hybrid_internal

void EncodeRleBitPackedHybrid(std::span<const uint32_t> values, int bit_width, std::vector<uint8_t>& out) {
  using namespace rle_hybrid_internal;
  TRELLARA_ASSERT(bit_width >= 1 && bit_width <= 32, "RLE hybrid bit width " + std::to_string(bit_width));
  const uint64_t value_limit = uint64_t{1} << bit_width;
  std::vector<uint32_t> pending;  // values for the next bit-packed run(s)
  size_t i = 0;
  while (i < values.size()) {
    const uint32_t value = values[i];
    TRELLARA_ASSERT(value < value_limit, "RLE hybrid value " + std::to_string(value) + " does not fit " +
                                             std::to_string(bit_width) + " bits");
    size_t run = 1;
    while (i + run < values.size() && values[i + run] == value) run++;
    if (run >= kRleRunValuesMin) {
      // Complete the pending literals to a whole group with values of this run, so the bit-packed
      // run before the RLE run holds a multiple of 8 values.
      const size_t fill = (kGroupValues - pending.size() % kGroupValues) % kGroupValues;
      pending.insert(pending.end(), fill, value);
      i += fill;
      run -= fill;
      FlushBitPacked(pending, bit_width, out);
      if (run >= kRleRunValuesMin) {
        PutRleRun(value, run, bit_width, out);
      } else {
        pending.insert(pending.end(), run, value);
      }
    } else {
      pending.insert(pending.end(), run, value);
    }
    i += run;
  }
  FlushBitPacked(pending, bit_width, out);
}

}  // namespace trellara::lake
