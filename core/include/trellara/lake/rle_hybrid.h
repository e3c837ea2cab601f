// rle_hybrid.h — Parquet's RLE / bit-packing hybrid encoding (Encodings.md, "Run Length Encoding /
// Bit-Packing Hybrid"), used for definition levels. Encodes only; the length prefix a data page v1
// puts in front of the levels is the page writer's job.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace trellara::lake {

// A bit-packed run holds at most this many groups of 8 values (parquet-mr's limit: the run header
// then fits one varint byte, which every reader handles).
inline constexpr uint32_t kBitPackedGroupsPerRunMax = 63;
// Runs of at least this many equal values are written as an RLE run; shorter ones are bit-packed.
inline constexpr size_t kRleRunValuesMin = 8;

// Appends the hybrid encoding of `values` (each < 2^bit_width, bit_width 1..32) to `out`.
// A bit-packed run in the middle always holds a multiple of 8 values; only the last run is padded
// with zero bits (the reader knows the value count from the page header).
void EncodeRleBitPackedHybrid(std::span<const uint32_t> values, int bit_width, std::vector<uint8_t>& out);

}  // namespace trellara::lake
