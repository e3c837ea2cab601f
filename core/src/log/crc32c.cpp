// crc32c.cpp — adapter from Crc32c() to Intel ISA-L's crc32_iscsi.
//
// ISA-L's crc32_iscsi takes the running register value (no pre/post inversion), so the standard
// CRC32C convention (init 0xFFFFFFFF, final xor 0xFFFFFFFF) is applied here.
#include "trellara/log/crc32c.h"

#include <isa-l/crc.h>

#include <climits>

namespace trellara {

uint32_t Crc32c(const void* data, size_t len, uint32_t crc) {
  auto* p = static_cast<unsigned char*>(const_cast<void*>(data));
  uint32_t reg = ~crc;
  while (len > 0) {
    int n = len > static_cast<size_t>(INT_MAX) ? INT_MAX : static_cast<int>(len);
    reg = crc32_iscsi(p, n, reg);
    p += n;
    len -= static_cast<size_t>(n);
  }
  return ~reg;
}

}  // namespace trellara
