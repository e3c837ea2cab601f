// crc32c.h — CRC32C (Castagnoli) of byte ranges, computed by Intel ISA-L.
//
// Used for log frame integrity. Never hand-rolled: ISA-L's crc32_iscsi is the hardware-accelerated
// Castagnoli CRC. Crc32c("123456789") == 0xE3069283 (tested).
#pragma once

#include <cstddef>
#include <cstdint>

namespace trellara {

// Standard CRC32C of [data, data+len), continuing from `crc` (pass the previous result to extend).
uint32_t Crc32c(const void* data, size_t len, uint32_t crc = 0);

}  // namespace trellara
