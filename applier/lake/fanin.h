// fanin.h — the fleet fan-in (`trellara lake fanin run`, docs/lake.md): many store databases'
// flow logs into one Iceberg lake, in epochs of source commit time. The decisions are core's
// (trellara/lake/epoch.h); this is the adapter: it reads each store's log through the same barrier
// as every applier, keeps its state and the lake's catalog in one PostgreSQL database (the Iceberg
// JDBC catalog's tables beside schema trellara_lake), and writes the lake's files to an object store
// (object_store.h: a directory or an S3-compatible bucket).
//
// Intake: for each store, the verified transactions read since its position are admitted to their
// epoch's dedup set (trellara_lake.transactions) with their changes (trellara_lake.changes), the
// store's position and the commit time its log is read through, in one catalog transaction. An
// identical replay is skipped; the same transaction with another checksum quarantines its epoch.
//
// Publication: for an epoch DecideEpoch says to publish, one Parquet data file per lake table for
// the stores it adds (content-addressed, written and fsynced before anything refers to it), the
// receipt recorded as pending, then the manifests and metadata files, then one catalog transaction
// that moves every table's metadata pointer and records the epoch published. A commit whose reply
// is lost (or a fan-in that died after recording the pending receipt) is settled by reading the
// catalog: the receipt there means committed; else the same publication — the same rows, so the
// same files at the same addresses — is committed again. No file is ever deleted.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trellara/lake/epoch.h"

namespace trellara::cli::lake {

struct LakeStoreConfig {
  std::string name;           // [[store]] name: 1..64 of [A-Za-z0-9_.-]
  std::string log_directory;  // [[store]] log_directory: the store flow's log (absolute)
};

// An S3-compatible warehouse ([lake] warehouse = "s3://bucket/prefix", docs/lake.md "Object stores").
struct LakeS3Config {
  std::string bucket;             // of the warehouse URI
  std::string prefix;             // of the warehouse URI, without slashes at either end ("" for none)
  std::string endpoint;           // [lake] s3_endpoint: http(s)://host[:port], path-style requests
  std::string region = "us-east-1";  // [lake] s3_region
  std::string access_key_id;      // [lake] s3_access_key_id, or aws_access_key_id of [lake] credentials
  std::string secret_access_key;  // [lake] s3_secret_access_key, or aws_secret_access_key of [lake] credentials
};

struct LakeConfig {
  std::string path;
  std::string name;              // [lake] name: the catalog name and the tables' namespace
  std::string warehouse;         // [lake] warehouse: an absolute directory or s3://bucket/prefix
  std::optional<LakeS3Config> s3;  // set for an s3:// warehouse
  std::string catalog_conninfo;  // [lake] catalog: the PostgreSQL database holding the catalog
  trellara::lake::FaninPolicy policy;  // [lake] epoch, gap_policy, gap_deadline
  uint64_t commit_skew_us = 5 * trellara::lake::kMicrosPerSecond;  // [lake] commit_skew
  std::vector<LakeStoreConfig> stores;
};

// Throws CommandFailed (exit 2) naming the file and the setting.
LakeConfig LoadLakeConfig(const std::string& path);

struct FaninOptions {
  bool until_caught_up = false;  // read every store to its end, publish what may be published, exit
};

// Runs until stopped (SIGTERM/SIGINT) or, with until_caught_up, until nothing more can be done
// now. Returns the exit code: 0, or 3 when an epoch is quarantined.
int RunFanin(const LakeConfig& config, const FaninOptions& options);

// `trellara lake plan`: every epoch the catalog knows, its state, each store's state for it and
// what it waits for.
nlohmann::json PlanLake(const LakeConfig& config);

// `trellara lake fanin verify`: every published epoch's files, manifests, metadata and counts
// against the catalog's dedup set and the stores' logs. Fills `report`; returns 0 (agrees),
// 1 (a difference, named in the report) — errors that stop it throw CommandFailed (exit 2).
int VerifyLake(const LakeConfig& config, nlohmann::json& report);

}  // namespace trellara::cli::lake
