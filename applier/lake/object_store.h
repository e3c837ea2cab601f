// object_store.h — where the lake's files go ([lake] warehouse, docs/lake.md "Object stores"): a
// local or mounted directory, or a bucket of an S3-compatible server. The fan-in writes every lake
// file through PutOnce and reads it back through Get/Exists; nothing else in the fan-in opens a lake
// file. It never deletes an object and never overwrites one with other content.
//
// Keys are relative ("<lake>/<table>/data/<epoch>-<sha256>.parquet"); Location(key) is what Iceberg
// metadata and the catalog hold: the absolute path for a directory, "s3://bucket/prefix/key" for S3.
//
// Durability: PutOnce returns only when the object is durable as the store defines it — a
// directory: written to a temporary file, fdatasync'd, renamed, the directory fsync'd; S3: the
// server answered 200 to the PUT (after checking Content-MD5), which S3 defines as stored.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

namespace trellara::cli::lake {

struct LakeConfig;

class ObjectStore {
 public:
  virtual ~ObjectStore() = default;
  // Stores `bytes` at `key` durably unless an object with the same bytes is there already (keys name
  // content). Returns true when it was there. Throws CommandFailed when the key holds other bytes
  // (changed outside the fan-in) or the store fails, naming the object and what to do.
  virtual bool PutOnce(const std::string& key, std::span<const uint8_t> bytes) = 0;
  // The object's bytes; nullopt when there is none at `key`. Throws on any other failure.
  virtual std::optional<std::string> Get(const std::string& key) = 0;
  virtual bool Exists(const std::string& key) = 0;
  // What Iceberg metadata and the catalog hold for `key`.
  virtual std::string Location(const std::string& key) const = 0;
  // The key of a location this store gave; nullopt for a location outside this store.
  std::optional<std::string> KeyOf(const std::string& location) const;
};

// The store the configuration's [lake] warehouse names. Throws CommandFailed on a bad setting.
std::unique_ptr<ObjectStore> OpenObjectStore(const LakeConfig& config);

}  // namespace trellara::cli::lake
