// avro_container.cpp — Avro container framing. It must never write a block whose count or size
// disagrees with its bytes, nor a codec other than "null" (nothing here compresses).
#include "trellara/lake/avro_container.h"

#include <iterator>

#include "trellara/base/assert.h"

namespace trellara::lake {

namespace avro_container_internal {

constexpr uint8_t kMagic[] = {'O', 'b', 'j', 1};

void PutAvroBytes(std::vector<uint8_t>& out, std::string_view bytes) {
  PutAvroLong(out, static_cast<int64_t>(bytes.size()));
  out.insert(out.end(), bytes.begin(), bytes.end());
}

}  // namespace avro_container_internal

void PutAvroLong(std::vector<uint8_t>& out, int64_t value) {
  uint64_t zigzag = (static_cast<uint64_t>(value) << 1) ^ static_cast<uint64_t>(value >> 63);
  while (zigzag >= 0x80) {
    out.push_back(static_cast<uint8_t>(zigzag | 0x80));
    zigzag >>= 7;
  }
  out.push_back(static_cast<uint8_t>(zigzag));
}

std::vector<uint8_t> AvroContainerFile(std::string_view schema_json,
                                       const std::vector<std::pair<std::string, std::string>>& metadata,
                                       const AvroSyncMarker& sync, int64_t object_count,
                                       const std::vector<uint8_t>& objects) {
  using namespace avro_container_internal;
  TRELLARA_ASSERT(object_count > 0 || objects.empty(), "Avro block bytes without objects");
  std::vector<uint8_t> out(std::begin(kMagic), std::end(kMagic));
  // The header's metadata: a map<bytes>, written as one block of every entry, then 0.
  PutAvroLong(out, static_cast<int64_t>(metadata.size() + 2));
  PutAvroBytes(out, "avro.schema");
  PutAvroBytes(out, schema_json);
  PutAvroBytes(out, "avro.codec");
  PutAvroBytes(out, "null");
  for (const auto& [key, value] : metadata) {
    PutAvroBytes(out, key);
    PutAvroBytes(out, value);
  }
  PutAvroLong(out, 0);
  out.insert(out.end(), sync.begin(), sync.end());
  if (object_count > 0) {
    PutAvroLong(out, object_count);
    PutAvroLong(out, static_cast<int64_t>(objects.size()));
    out.insert(out.end(), objects.begin(), objects.end());
    out.insert(out.end(), sync.begin(), sync.end());
  }
  return out;
}

}  // namespace trellara::lake
