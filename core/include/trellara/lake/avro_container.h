// avro_container.h — the Avro object container file framing (Avro spec, "Object Container Files"):
// header (magic, metadata map with avro.schema and avro.codec "null", sync marker) and data
// blocks. The objects inside a block are encoded by the caller (iceberg_manifest.cpp, with
// libavro); this file only frames them, because libavro's file writer cannot add the user metadata
// Iceberg requires (the table schema and partition spec of a manifest).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace trellara::lake {

using AvroSyncMarker = std::array<uint8_t, 16>;

// Avro's long: zigzag, then a base-128 varint.
void PutAvroLong(std::vector<uint8_t>& out, int64_t value);

// A whole container file: header with `schema_json` as avro.schema, codec "null" and `metadata`
// (key, value) pairs in order, then one data block holding `object_count` objects whose encodings
// are `objects` back to back (no block when object_count is 0).
std::vector<uint8_t> AvroContainerFile(std::string_view schema_json,
                                       const std::vector<std::pair<std::string, std::string>>& metadata,
                                       const AvroSyncMarker& sync, int64_t object_count,
                                       const std::vector<uint8_t>& objects);

}  // namespace trellara::lake
