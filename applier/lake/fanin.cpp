// fanin.cpp — the fleet fan-in (fanin.h, docs/lake.md).
#include "lake/fanin.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <thread>

#include <toml++/toml.h>

#include "engine/applier.h"
#include "kit/errors.h"
#include "lake/catalog_text.h"
#include "lake/object_store.h"
#include "lake/view_tables.h"
#include "pg/pg_connection.h"
#include "trellara/base/fault.h"
#include "trellara/lake/iceberg_manifest.h"
#include "trellara/lake/iceberg_table.h"
#include "trellara/lake/parquet_writer.h"
#include "trellara/log/barrier.h"
#include "trellara/log/consumer_offsets.h"
#include "trellara/log/reader.h"
#include "trellara/log/retention.h"
#include "trellara/log/uring_device.h"
#include "trellara/record/codec.h"
#include "trellara/record/envelope.h"
#include "trellara/report/pilot_package.h"

namespace trellara::cli::lake {
namespace core = trellara::lake;
using json = nlohmann::json;

namespace {

constexpr const char* kEventsRelation = "_trellara.events";  // DDL and logical messages of a store
constexpr size_t kIntakeTransactionsMax = 256;                // per catalog transaction

// The catalog database: Iceberg's JDBC catalog tables (so engines open the lake with their stock
// catalog) and the fan-in's own state, which commit together.
constexpr const char* kCatalogSchema = R"sql(
CREATE TABLE IF NOT EXISTS iceberg_tables (
  catalog_name varchar(255) NOT NULL, table_namespace varchar(255) NOT NULL, table_name varchar(255) NOT NULL,
  metadata_location varchar(1000), previous_metadata_location varchar(1000), iceberg_type varchar(5),
  PRIMARY KEY (catalog_name, table_namespace, table_name));
CREATE TABLE IF NOT EXISTS iceberg_namespace_properties (
  catalog_name varchar(255) NOT NULL, namespace varchar(255) NOT NULL, property_key varchar(255) NOT NULL,
  property_value varchar(1000), PRIMARY KEY (catalog_name, namespace, property_key));
CREATE SCHEMA IF NOT EXISTS trellara_lake;
CREATE TABLE IF NOT EXISTS trellara_lake.stores (
  lake text NOT NULL, store text NOT NULL, log_directory text NOT NULL, next_offset bigint NOT NULL DEFAULT 0,
  through_us bigint NOT NULL DEFAULT 0, PRIMARY KEY (lake, store));
CREATE TABLE IF NOT EXISTS trellara_lake.transactions (
  lake text NOT NULL, store text NOT NULL, commit_lsn pg_lsn NOT NULL, xid bigint NOT NULL, epoch bigint NOT NULL,
  commit_time_us bigint NOT NULL, checksum text NOT NULL, changes bigint NOT NULL,
  PRIMARY KEY (lake, store, commit_lsn, xid));
CREATE TABLE IF NOT EXISTS trellara_lake.changes (
  lake text NOT NULL, store text NOT NULL, commit_lsn pg_lsn NOT NULL, xid bigint NOT NULL, position int NOT NULL,
  epoch bigint NOT NULL, relation text NOT NULL, op text NOT NULL, columns text[] NOT NULL, vals text[] NOT NULL,
  unchanged text[] NOT NULL, PRIMARY KEY (lake, store, commit_lsn, xid, position));
CREATE TABLE IF NOT EXISTS trellara_lake.epochs (
  lake text NOT NULL, epoch bigint NOT NULL, state text NOT NULL DEFAULT 'open', stores text[] NOT NULL DEFAULT '{}',
  missing text[] NOT NULL DEFAULT '{}', receipt text, transactions bigint, changes bigint, quarantine text,
  quarantined_stores text[] NOT NULL DEFAULT '{}', pending_receipt text, published_at timestamptz,
  PRIMARY KEY (lake, epoch));
CREATE TABLE IF NOT EXISTS trellara_lake.tables (
  lake text NOT NULL, table_name text NOT NULL, table_uuid text NOT NULL, source_columns text[] NOT NULL,
  snapshots jsonb NOT NULL DEFAULT '[]', metadata_log jsonb NOT NULL DEFAULT '[]', PRIMARY KEY (lake, table_name));
ALTER TABLE trellara_lake.changes ADD COLUMN IF NOT EXISTS key_columns text[] NOT NULL DEFAULT '{}',
  ADD COLUMN IF NOT EXISTS old_key text[];
CREATE TABLE IF NOT EXISTS trellara_lake.views (
  lake text NOT NULL, table_name text NOT NULL, base_table text NOT NULL, kind text NOT NULL, table_uuid text NOT NULL,
  through_epoch bigint, horizon_epochs bigint NOT NULL, rows bigint NOT NULL, snapshots jsonb NOT NULL DEFAULT '[]',
  metadata_log jsonb NOT NULL DEFAULT '[]', built_at timestamptz, PRIMARY KEY (lake, table_name));
)sql";

std::string Lsn(uint64_t lsn) { return FormatLsn(lsn); }

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}
uint64_t NowUs() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
}

std::vector<uint8_t> Bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

// The lake table's columns: what every row says about its source transaction, then the source
// relation's columns (text form; docs/lake.md "Tables").
std::vector<core::ParquetColumn> TableColumns(const std::vector<std::string>& source_columns) {
  using T = core::ColumnType;
  std::vector<core::ParquetColumn> c = {
      {"_source", 1, T::kString, true, 0, 0},  {"_epoch", 2, T::kString, true, 0, 0},
      {"_commit_lsn", 3, T::kString, true, 0, 0}, {"_xid", 4, T::kLong, true, 0, 0},
      {"_commit_time", 5, T::kTimestampTz, true, 0, 0}, {"_position", 6, T::kInt, true, 0, 0},
      {"_op", 7, T::kString, true, 0, 0},     {"_unchanged", 8, T::kString, false, 0, 0}};
  int32_t id = 9;
  for (const auto& name : source_columns) c.push_back({name, id++, T::kString, false, 0, 0});
  return c;
}

void Say(const LakeConfig& config, const std::string& event, const std::string& fields) {
  std::cerr << "lake fanin lake=" << config.name << " event=" << event << (fields.empty() ? "" : " " + fields)
            << std::endl;
}

// ---- the catalog connection ---------------------------------------------------------------

class Catalog {
 public:
  explicit Catalog(const LakeConfig& config) : config_(config) {}
  void Connect() {
    auto conn = PgConnection::Connect(config_.catalog_conninfo, "trellara lake fanin " + config_.name);
    if (!conn)
      throw CommandFailed("cannot connect to the lake's catalog database (" +
                          PgConnection::DescribeConninfo(config_.catalog_conninfo) + ", [lake] catalog of " +
                          config_.path + "): " + conn.error().message);
    conn_ = std::move(conn.value());
    Must(conn_->Exec("SET synchronous_commit = on; SET client_min_messages = warning"), "setting the catalog session");
  }
  void CreateSchema() { Must(conn_->Exec(kCatalogSchema), "creating the catalog's tables"); }
  PgResult Must(PgResult r, const std::string& what) {
    if (r.ok()) return r;
    throw CommandFailed("lake " + config_.name + ": " + what + " failed on the catalog database " +
                        conn_->Describe() + ": " + r.Describe());
  }
  PgResult Run(const std::string& sql, const SqlParams& params, const std::string& what) {
    return Must(conn_->ExecParams(sql, params), what);
  }
  PgConnection& conn() { return *conn_; }

 private:
  const LakeConfig& config_;
  std::unique_ptr<PgConnection> conn_;
};

// ---- the fan-in ---------------------------------------------------------------------------

struct StagedChange {
  uint32_t position = 0;
  std::string relation;
  std::string op;
  std::vector<std::string> columns;
  std::vector<std::optional<std::string>> values;
  std::vector<std::string> unchanged;
  std::vector<std::string> key_columns;  // the relation's key columns (replica identity / primary key)
  std::optional<std::vector<std::optional<std::string>>> old_key;  // an update's old key, when the source sent one
};

class Fanin {
 public:
  Fanin(const LakeConfig& config, const FaninOptions& options)
      : config_(config), options_(options), catalog_(config), store_(OpenObjectStore(config)) {}

  int Run() {
    auto device = log::OpenUringDevice();
    if (!device) throw CommandFailed("cannot open io_uring to read the stores' logs: " + device.error().message);
    device_ = std::move(device.value());
    catalog_.Connect();
    catalog_.CreateSchema();
    for (const auto& store : config_.stores) {
      catalog_.Run("INSERT INTO trellara_lake.stores (lake, store, log_directory) VALUES ($1, $2, $3) "
                   "ON CONFLICT (lake, store) DO UPDATE SET log_directory = EXCLUDED.log_directory",
                   {config_.name, store.name, store.log_directory}, "registering store " + store.name);
    }
    catalog_.Run("INSERT INTO iceberg_namespace_properties VALUES ($1, $2, 'exists', 'true') ON CONFLICT DO NOTHING",
                 {config_.name, config_.name}, "creating the lake's namespace");
    Say(config_, "started", "stores=" + std::to_string(config_.stores.size()));
    for (;;) {
      bool read_any = false;
      for (const auto& store : config_.stores) read_any = Intake(store) || read_any;
      Publish();
      // The views follow the horizon of what the catalog now holds (after this pass's commits).
      PublishViews(catalog_.conn(), *store_, config_, views_memory_);
      // --until-caught-up ends once nothing was read and no commit's outcome is unknown.
      if (options_.until_caught_up && !read_any && unknown_.empty()) break;
      if (apply::StopRequested()) break;
      if (!read_any) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    const PgResult q = catalog_.Run("SELECT count(*) FROM trellara_lake.epochs WHERE lake = $1 AND state = 'quarantined'",
                                    {config_.name}, "counting quarantined epochs");
    const int quarantined = std::stoi(q.Value(0, 0).value_or("0"));
    Say(config_, "stopped", "quarantined_epochs=" + std::to_string(quarantined));
    return quarantined > 0 ? kExitFlowBlocked : 0;
  }

 private:
  // ---- intake ----
  // Reads what store `store` has past its position; returns whether it admitted anything.
  bool Intake(const LakeStoreConfig& store) {
    auto exists = device_->Exists(store.log_directory);
    if (!exists || !*exists) return false;  // its relay has not created it yet
    const std::string consumer = "lake." + config_.name;
    if (Status s = log::RegisterConsumer(*device_, store.log_directory, consumer); !s.ok())
      throw CommandFailed("store " + store.name + " of lake " + config_.name + ": " + s.error().message);
    PgResult pos = catalog_.Run("SELECT next_offset, through_us FROM trellara_lake.stores WHERE lake = $1 AND store = $2",
                                {config_.name, store.name}, "reading the position of store " + store.name);
    uint64_t next = std::stoull(pos.Value(0, 0).value_or("0"));
    uint64_t through = std::stoull(pos.Value(0, 1).value_or("0"));
    auto reader = log::LogReader::Open(*device_, store.log_directory);
    if (!reader) throw CommandFailed("cannot open the log of store " + store.name + " at " + store.log_directory + ": " + reader.error().message);
    auto chunks = log::LogReader::Open(*device_, store.log_directory);
    if (!chunks) throw CommandFailed("cannot open the log of store " + store.name + ": " + chunks.error().message);
    if (next < (*reader)->next_offset()) {
      throw CommandFailed("store " + store.name + " of lake " + config_.name + " resumes at log offset " +
                          std::to_string(next) + " but its log at " + store.log_directory + " starts at " +
                          std::to_string((*reader)->next_offset()) +
                          ": what the lake still needed was reclaimed; the lake cannot be completed exactly for it");
    }
    if (Status s = (*reader)->Seek(next); !s.ok())
      throw CommandFailed("cannot read store " + store.name + " at log offset " + std::to_string(next) + ": " + s.error().message);
    TransactionBarrier barrier;
    std::vector<std::pair<ReadyTransaction, std::vector<StagedChange>>> ready;
    uint64_t resume = next;
    uint64_t new_through = through;
    for (;;) {
      auto record = (*reader)->Next();
      if (!record) throw CommandFailed("cannot read the log of store " + store.name + ": " + record.error().message);
      if (!record->has_value()) break;
      const log::LogRecord& r = **record;
      auto fed = barrier.Feed(LogFrame{r.offset, r.type, r.commit_lsn,
                                       std::span<const uint8_t>(r.payload.data(), r.payload.size())});
      if (!fed.ok())
        throw CommandFailed("the log of store " + store.name + " cannot be read past offset " + std::to_string(r.offset) +
                            ": " + fed.error().message + "; the lake stops here for this store (repair its log: "
                            "trellara repair-plan)");
      if (barrier.stats().last_progress_time_us)
        new_through = std::max(new_through, static_cast<uint64_t>(*barrier.stats().last_progress_time_us));
      if (!fed->has_value()) {
        if (!barrier.RetainFromOffset()) resume = (*reader)->next_offset();
        continue;
      }
      ReadyTransaction tx = std::move(**fed);
      new_through = std::max(new_through, static_cast<uint64_t>(tx.commit_time_us));
      ready.push_back({std::move(tx), {}});
      Stage(store, *chunks->get(), ready.back());
      resume = barrier.RetainFromOffset().value_or((*reader)->next_offset());
      if (ready.size() >= kIntakeTransactionsMax) break;
    }
    if (resume == next && ready.empty() && new_through == through) return false;
    Admit(store, ready, resume, new_through);
    (void)log::WriteConsumerOffset(*device_, store.log_directory, consumer, resume);
    return !ready.empty() || resume != next;
  }

  void Stage(const LakeStoreConfig& store, log::LogReader& chunks, std::pair<ReadyTransaction, std::vector<StagedChange>>& item) {
    const ReadyTransaction& tx = item.first;
    if (tx.partitioned())
      throw CommandFailed("store " + store.name + " logs a partitioned transaction (commit " + Lsn(tx.tx.commit_lsn) +
                          "): a partitioned flow into the lake is not built; set the store's flow to strict mode");
    std::vector<std::pair<const std::vector<RelationInfo>*, const std::vector<Change>*>> parts;
    std::vector<Chunk> held;
    if (tx.envelope) {
      parts.push_back({&tx.envelope->relations, &tx.envelope->changes});
    } else {
      held.reserve(tx.chunks.size());
      for (const ChunkLocation& loc : tx.chunks) {
        if (Status s = chunks.Seek(loc.offset); !s.ok())
          throw CommandFailed("cannot re-read chunk " + std::to_string(loc.seq) + " of store " + store.name + ": " + s.error().message);
        auto frame = chunks.Next();
        if (!frame || !frame->has_value())
          throw CommandFailed("cannot re-read chunk " + std::to_string(loc.seq) + " of store " + store.name);
        auto decoded = DecodeRecord(std::span<const uint8_t>((**frame).payload.data(), (**frame).payload.size()));
        if (!decoded || !std::holds_alternative<Chunk>(*decoded) || std::get<Chunk>(*decoded).checksum != loc.checksum)
          throw CommandFailed("chunk " + std::to_string(loc.seq) + " of store " + store.name + " at log offset " +
                              std::to_string(loc.offset) + " is not the chunk the barrier verified");
        held.push_back(std::get<Chunk>(std::move(*decoded)));
      }
      for (const Chunk& c : held) parts.push_back({&c.relations, &c.changes});
    }
    uint32_t position = 0;
    for (const auto& [relations, changes] : parts) {
      auto relation_of = [&](uint32_t oid) -> const RelationInfo* {
        for (const auto& r : *relations)
          if (r.oid == oid) return &r;
        return nullptr;
      };
      for (const Change& c : *changes) {
        StagedChange s;
        s.position = position++;
        if (c.op == Op::Insert || c.op == Op::Update || c.op == Op::Delete) {
          const RelationInfo* rel = relation_of(c.relation_oid);
          if (rel == nullptr)
            throw CommandFailed("store " + store.name + " transaction " + std::to_string(tx.tx.xid) + " names relation " +
                                std::to_string(c.relation_oid) + " without describing it");
          s.relation = rel->schema + "." + rel->name;
          s.op = c.op == Op::Insert ? "insert" : c.op == Op::Update ? "update" : "delete";
          for (const auto& col : rel->columns) {
            s.columns.push_back(col.name);
            if (col.is_key) s.key_columns.push_back(col.name);
          }
          // An update's old image (its key changed, or replica identity full): the old key's values.
          if (c.op == Op::Update && c.old_image != OldImage::None) {
            std::vector<std::optional<std::string>> old_key;
            size_t k = 0;
            for (size_t i = 0; i < rel->columns.size(); i++) {
              const bool in_image = c.old_image == OldImage::Full || rel->columns[i].is_key;
              const size_t at = c.old_image == OldImage::Full ? i : k;
              if (!in_image) continue;
              k++;
              if (!rel->columns[i].is_key) continue;
              if (at < c.old_tuple.size() && c.old_tuple[at].kind == Value::Kind::Text) old_key.push_back(c.old_tuple[at].data);
              else if (at < c.old_tuple.size() && c.old_tuple[at].kind == Value::Kind::Binary)
                old_key.push_back("\\x" + HexEncode(reinterpret_cast<const uint8_t*>(c.old_tuple[at].data.data()), c.old_tuple[at].data.size()));
              else old_key.push_back(std::nullopt);
            }
            s.old_key = std::move(old_key);
          }
          const std::vector<Value>& tuple = c.op == Op::Delete ? c.old_tuple : c.new_tuple;
          const bool key_only = c.op == Op::Delete && c.old_image == OldImage::Key;
          size_t k = 0;
          for (size_t i = 0; i < rel->columns.size(); i++) {
            if (key_only && !rel->columns[i].is_key) {
              s.values.push_back(std::nullopt);
              continue;
            }
            const size_t at = key_only ? k++ : i;
            if (at >= tuple.size()) {
              s.values.push_back(std::nullopt);
              continue;
            }
            const Value& v = tuple[at];
            if (v.kind == Value::Kind::Text) s.values.push_back(v.data);
            else if (v.kind == Value::Kind::Binary) s.values.push_back("\\x" + HexEncode(reinterpret_cast<const uint8_t*>(v.data.data()), v.data.size()));
            else if (v.kind == Value::Kind::UnchangedToast) {
              s.values.push_back(std::nullopt);
              s.unchanged.push_back(rel->columns[i].name);
            } else s.values.push_back(std::nullopt);
          }
          item.second.push_back(std::move(s));
        } else if (c.op == Op::Truncate) {
          for (uint32_t oid : c.truncate.relation_oids) {
            const RelationInfo* rel = relation_of(oid);
            StagedChange t;
            t.position = s.position;
            t.relation = rel ? rel->schema + "." + rel->name : "_trellara.unknown_" + std::to_string(oid);
            t.op = "truncate";
            if (rel)
              for (const auto& col : rel->columns) {
                t.columns.push_back(col.name);
                t.values.push_back(std::nullopt);
              }
            item.second.push_back(std::move(t));
            if (&oid != &c.truncate.relation_oids.back()) position++;
          }
        } else {
          s.relation = kEventsRelation;
          s.op = c.op == Op::Ddl ? "ddl" : "message";
          s.columns = {"kind", "detail"};
          if (c.op == Op::Ddl) s.values = {c.ddl.command_tag, c.ddl.sql};
          else s.values = {c.message.prefix, c.message.content};
          item.second.push_back(std::move(s));
        }
      }
    }
  }

  // One catalog transaction: the transactions into their epochs' dedup sets (one statement), the
  // changes of those that are new (one COPY), conflicts recorded, the store's position and time.
  void Admit(const LakeStoreConfig& store, const std::vector<std::pair<ReadyTransaction, std::vector<StagedChange>>>& ready,
             uint64_t resume, uint64_t through) {
    catalog_.Must(catalog_.conn().Exec("BEGIN"), "BEGIN of the intake of store " + store.name);
    uint64_t added = 0, replays = 0;
    std::string lsns = "{", xids = "{", epochs = "{", times = "{", checksums = "{", counts = "{";
    for (size_t i = 0; i < ready.size(); i++) {
      const ReadyTransaction& tx = ready[i].first;
      const char* sep = i ? "," : "";
      lsns += sep + Lsn(tx.tx.commit_lsn);
      xids += sep + std::to_string(tx.tx.xid);
      epochs += sep + std::to_string(core::EpochIndexOf(static_cast<uint64_t>(tx.commit_time_us), config_.policy.epoch_length_us));
      times += sep + std::to_string(tx.commit_time_us);
      checksums += sep + HexEncode(tx.checksum);
      counts += sep + std::to_string(tx.total_changes);
    }
    std::set<std::pair<std::string, std::string>> fresh;  // (commit LSN, xid) admitted now
    if (!ready.empty()) {
      PgResult ins = catalog_.Run(
          "INSERT INTO trellara_lake.transactions (lake, store, commit_lsn, xid, epoch, commit_time_us, checksum, changes) "
          "SELECT $1, $2, l::pg_lsn, x, e, t, c, n FROM unnest($3::text[], $4::bigint[], $5::bigint[], $6::bigint[], "
          "$7::text[], $8::bigint[]) AS u(l, x, e, t, c, n) ON CONFLICT DO NOTHING RETURNING commit_lsn::text, xid::text",
          {config_.name, store.name, lsns + "}", xids + "}", epochs + "}", times + "}", checksums + "}", counts + "}"},
          "admitting " + std::to_string(ready.size()) + " transaction(s) of store " + store.name);
      for (int i = 0; i < ins.rows(); i++) fresh.insert({*ins.Value(i, 0), *ins.Value(i, 1)});
    }
    std::string copy;
    for (const auto& [tx, changes] : ready) {
      const uint64_t epoch = core::EpochIndexOf(static_cast<uint64_t>(tx.commit_time_us), config_.policy.epoch_length_us);
      const std::string checksum = HexEncode(tx.checksum);
      if (!fresh.count({Lsn(tx.tx.commit_lsn), std::to_string(tx.tx.xid)})) {
        PgResult held = catalog_.Run(
            "SELECT checksum, changes, epoch FROM trellara_lake.transactions WHERE lake = $1 AND store = $2 AND "
            "commit_lsn = $3::pg_lsn AND xid = $4",
            {config_.name, store.name, Lsn(tx.tx.commit_lsn), std::to_string(tx.tx.xid)}, "reading a held transaction");
        const std::string held_checksum = held.Value(0, 0).value_or("");
        const uint64_t held_epoch = std::stoull(held.Value(0, 2).value_or("0"));
        if (held_checksum == checksum) {
          replays++;
          // Negative control (tests only): a replay counted again in its published epoch, as a
          // counter incremented per arrival would (the counts are recomputed from the dedup set).
          if (fault::Hit("defect.lake_count_by_increment") == fault::Action::Defect)
            catalog_.Run("UPDATE trellara_lake.epochs SET transactions = transactions + 1, changes = changes + $3 "
                         "WHERE lake = $1 AND epoch = $2 AND receipt IS NOT NULL",
                         {config_.name, std::to_string(held_epoch), held.Value(0, 1).value_or("0")},
                         "counting a replay (defect)");
          continue;
        }
        const core::Conflict conflict{store.name, tx.tx.commit_lsn, tx.tx.xid, held_checksum, checksum};
        Quarantine(held_epoch, store.name, core::DescribeConflict(conflict, core::EpochName(held_epoch)));
        continue;
      }
      added++;
      // A transaction of a store the epoch was already published with: it arrived too late for it.
      auto published = published_with_.find(epoch);
      if (published == published_with_.end()) {
        PgResult late = catalog_.Run("SELECT stores FROM trellara_lake.epochs WHERE lake = $1 AND epoch = $2",
                                     {config_.name, std::to_string(epoch)}, "checking a late arrival");
        published = published_with_.emplace(epoch, ParseNameArray(late.rows() == 1 ? late.Value(0, 0) : std::nullopt)).first;
      }
      if (published->second.count(store.name))
        Quarantine(epoch, store.name,
                   "store " + store.name + " transaction " + std::to_string(tx.tx.xid) + " at commit LSN " +
                       Lsn(tx.tx.commit_lsn) + " (commit time " + std::to_string(tx.commit_time_us) + " us) arrived after " +
                       core::EpochName(epoch) + " was published with the store: its commit time is older than the "
                       "store's progress by more than [lake] commit_skew");
      for (const StagedChange& c : changes) {
        copy += CopyField(config_.name) + '\t' + CopyField(store.name) + '\t' + Lsn(tx.tx.commit_lsn) + '\t' +
                std::to_string(tx.tx.xid) + '\t' + std::to_string(c.position) + '\t' + std::to_string(epoch) + '\t' +
                CopyField(c.relation) + '\t' + c.op + '\t' + CopyField(ArrayLiteral(c.columns)) + '\t' +
                CopyField(ArrayLiteral(c.values)) + '\t' + CopyField(ArrayLiteral(c.unchanged)) + '\t' +
                CopyField(ArrayLiteral(c.key_columns)) + '\t' + (c.old_key ? CopyField(ArrayLiteral(*c.old_key)) : "\\N") +
                '\n';
      }
    }
    if (!copy.empty()) {
      catalog_.Must(catalog_.conn().StartCopy("COPY trellara_lake.changes (lake, store, commit_lsn, xid, position, epoch, "
                                              "relation, op, columns, vals, unchanged, key_columns, old_key) FROM STDIN"),
                    "staging the changes of store " + store.name);
      if (Status put = catalog_.conn().PutCopyData(copy.data(), copy.size()); !put.ok())
        throw CommandFailed("staging the changes of store " + store.name + ": " + put.error().message);
      if (Status end = catalog_.conn().PutCopyEnd(); !end.ok())
        throw CommandFailed("staging the changes of store " + store.name + ": " + end.error().message);
      catalog_.Must(catalog_.conn().FinishCopy(), "staging the changes of store " + store.name);
    }
    catalog_.Run("UPDATE trellara_lake.stores SET next_offset = $3, through_us = greatest(through_us, $4) "
                 "WHERE lake = $1 AND store = $2",
                 {config_.name, store.name, std::to_string(resume), std::to_string(through)},
                 "recording the position of store " + store.name);
    if (fault::Hit("lake.before_intake_commit") == fault::Action::Error)
      throw CommandFailed("injected fault lake.before_intake_commit");
    catalog_.Must(catalog_.conn().Exec("COMMIT"), "COMMIT of the intake of store " + store.name);
    if (added || replays)
      Say(config_, "intake", "store=" + store.name + " admitted=" + std::to_string(added) + " replays_skipped=" +
                                 std::to_string(replays) + " next_offset=" + std::to_string(resume));
  }

  // A field of COPY's text format: backslash, tab, newline and carriage return escaped.
  static std::string CopyField(const std::string& text) {
    std::string out;
    out.reserve(text.size());
    for (char c : text) {
      if (c == '\\') out += "\\\\";
      else if (c == '\t') out += "\\t";
      else if (c == '\n') out += "\\n";
      else if (c == '\r') out += "\\r";
      else out += c;
    }
    return out;
  }

  void Quarantine(uint64_t epoch, const std::string& store, const std::string& why) {
    catalog_.Run("INSERT INTO trellara_lake.epochs (lake, epoch, state, quarantine, quarantined_stores) "
                 "VALUES ($1, $2, 'quarantined', $3, ARRAY[$4]) ON CONFLICT (lake, epoch) DO UPDATE SET "
                 "state = 'quarantined', quarantine = coalesce(trellara_lake.epochs.quarantine, EXCLUDED.quarantine), "
                 "quarantined_stores = array(SELECT DISTINCT unnest(trellara_lake.epochs.quarantined_stores || $4))",
                 {config_.name, std::to_string(epoch), why, store}, "quarantining " + core::EpochName(epoch));
    Say(config_, "quarantine", "epoch=" + core::EpochName(epoch) + " store=" + store + " reason=\"" + why + "\"");
  }

  // ---- publication ----
  void Publish() {
    PgResult stores = catalog_.Run("SELECT store, through_us FROM trellara_lake.stores WHERE lake = $1",
                                   {config_.name}, "reading the stores' progress");
    std::map<std::string, uint64_t> through;
    for (int i = 0; i < stores.rows(); i++) through[*stores.Value(i, 0)] = std::stoull(stores.Value(i, 1).value_or("0"));
    PgResult epochs = catalog_.Run(
        "SELECT e FROM (SELECT DISTINCT epoch AS e FROM trellara_lake.transactions WHERE lake = $1 UNION "
        "SELECT epoch FROM trellara_lake.epochs WHERE lake = $1) x ORDER BY e",
        {config_.name}, "listing the epochs");
    for (int i = 0; i < epochs.rows(); i++) PublishEpoch(std::stoull(*epochs.Value(i, 0)), through);
  }

  void PublishEpoch(uint64_t epoch, const std::map<std::string, uint64_t>& through) {
    PgResult row = catalog_.Run("SELECT state, stores, receipt, pending_receipt, quarantined_stores FROM "
                                "trellara_lake.epochs WHERE lake = $1 AND epoch = $2",
                                {config_.name, std::to_string(epoch)}, "reading " + core::EpochName(epoch));
    core::EpochFacts facts;
    facts.index = epoch;
    facts.now_us = NowUs();
    std::set<std::string> quarantined_stores;
    std::optional<std::string> receipt, pending;
    if (row.rows() == 1) {
      const std::string state = row.Value(0, 0).value_or("open");
      facts.quarantined = state == "quarantined";
      if (state == "complete" || state == "complete_with_gaps") {
        facts.published.state = state == "complete" ? core::EpochState::Complete : core::EpochState::CompleteWithGaps;
        facts.published.stores = ParseNameArray(row.Value(0, 1));
      }
      receipt = row.Value(0, 2);
      pending = row.Value(0, 3);
      quarantined_stores = ParseNameArray(row.Value(0, 4));
    }
    facts.commit_pending = pending.has_value() || unknown_.count(epoch) > 0;
    // A store is through the epoch once its progress passed the end by the allowed commit skew.
    for (const auto& s : config_.stores) {
      auto t = through.find(s.name);
      const uint64_t at = t == through.end() ? 0 : t->second;
      facts.stores.push_back({s.name, at >= config_.commit_skew_us ? at - config_.commit_skew_us : 0, false,
                              quarantined_stores.count(s.name) > 0});
    }
    core::EpochDecision d = core::DecideEpoch(facts, config_.policy);
    switch (d.action) {
      case core::EpochAction::None:
      case core::EpochAction::Wait:
        return;
      case core::EpochAction::Quarantine:
        // Negative control (tests only): the quarantined epoch published anyway as complete with
        // every store (its files already written: the stores it held count as published).
        if (fault::Hit("defect.lake_publish_on_conflict") == fault::Action::Defect) {
          d.state = core::EpochState::Complete;
          for (const auto& s : config_.stores) d.include.insert(s.name);
          if (row.rows() == 1) facts.published.stores = ParseNameArray(row.Value(0, 1));
          break;
        }
        return;
      case core::EpochAction::SettleCommit: {
        const std::string asked = pending ? *pending : unknown_[epoch];
        const bool holds = receipt && *receipt == asked;
        Say(config_, "pending_catalog_commit", "epoch=" + core::EpochName(epoch) + " receipt=" + asked.substr(0, 16) +
                                                   " catalog_holds_receipt=" + (holds ? "true" : "false"));
        unknown_.erase(epoch);
        if (core::SettlePendingCommit(holds) == core::CommitSettlement::Committed) {
          if (pending)
            catalog_.Run("UPDATE trellara_lake.epochs SET pending_receipt = NULL WHERE lake = $1 AND epoch = $2",
                         {config_.name, std::to_string(epoch)}, "settling " + core::EpochName(epoch));
          return;
        }
        // Not committed: the same publication again (the same rows give the same files).
        facts.commit_pending = false;
        d = core::DecideEpoch(facts, config_.policy);
        if (d.action != core::EpochAction::Publish) return;
        break;
      }
      case core::EpochAction::Publish:
        break;
    }
    Commit(epoch, d, facts.published.stores);
  }

  struct TablePublication {
    std::string table;
    std::vector<std::string> source_columns;
    std::string uuid;
    json snapshots = json::array();
    json metadata_log = json::array();
    std::optional<std::string> previous_metadata;
    core::ParquetFile file;
    std::string data_key;   // in the object store
    std::string data_path;  // its location (what the manifests and the catalog hold)
    bool exists = false;
  };

  void Commit(uint64_t epoch, const core::EpochDecision& d, const std::set<std::string>& already) {
    const std::string name = core::EpochName(epoch);
    std::vector<std::string> added;
    for (const auto& s : d.include)
      if (!already.count(s)) added.push_back(s);
    // The rows of the added stores, table by table, in a fixed order: the same publication always
    // writes the same files.
    PgResult rows = catalog_.Run(
        "SELECT c.relation, c.store, c.commit_lsn::text, c.xid, t.commit_time_us, c.position, c.op, c.columns, c.vals, "
        "c.unchanged FROM trellara_lake.changes c JOIN trellara_lake.transactions t USING (lake, store, commit_lsn, xid) "
        "WHERE c.lake = $1 AND c.epoch = $2 AND c.store = ANY($3::text[]) "
        "ORDER BY c.relation, c.store, c.commit_lsn, c.xid, c.position",
        {config_.name, std::to_string(epoch), ArrayLiteral(added)}, "reading the changes of " + name);
    std::map<std::string, std::vector<int>> by_table;
    for (int i = 0; i < rows.rows(); i++) by_table[*rows.Value(i, 0)].push_back(i);
    std::vector<TablePublication> tables;
    std::vector<std::string> addresses;
    for (const auto& [relation, indexes] : by_table) {
      TablePublication t;
      t.table = TableNameOf(relation);
      PgResult held = catalog_.Run("SELECT table_uuid, source_columns, snapshots::text, metadata_log::text FROM "
                                   "trellara_lake.tables WHERE lake = $1 AND table_name = $2",
                                   {config_.name, t.table}, "reading lake table " + t.table);
      std::vector<std::string> first_columns;
      for (const auto& v : ParseArray(rows.Value(indexes.front(), 7).value_or("{}"))) first_columns.push_back(v.value_or(""));
      if (held.rows() == 1) {
        t.exists = true;
        t.uuid = *held.Value(0, 0);
        for (const auto& v : ParseArray(held.Value(0, 1).value_or("{}"))) t.source_columns.push_back(v.value_or(""));
        t.snapshots = json::parse(held.Value(0, 2).value_or("[]"));
        t.metadata_log = json::parse(held.Value(0, 3).value_or("[]"));
      } else {
        t.source_columns = first_columns;
        t.uuid = pilot::Sha256Hex(config_.name + "/" + t.table).substr(0, 32);
        t.uuid = t.uuid.substr(0, 8) + "-" + t.uuid.substr(8, 4) + "-4" + t.uuid.substr(13, 3) + "-8" +
                 t.uuid.substr(17, 3) + "-" + t.uuid.substr(20, 12);
      }
      auto writer = core::ParquetWriter::Create(TableColumns(t.source_columns), core::ParquetWriterOptions{});
      if (!writer) throw CommandFailed("lake table " + t.table + ": " + writer.error().message);
      for (int i : indexes) {
        std::vector<std::string> columns;
        for (const auto& v : ParseArray(rows.Value(i, 7).value_or("{}"))) columns.push_back(v.value_or(""));
        if (columns != t.source_columns && !(columns.empty())) {
          Quarantine(epoch, *rows.Value(i, 1),
                     "relation " + relation + " of store " + *rows.Value(i, 1) + " has columns " + ArrayLiteral(columns) +
                         " where lake table " + t.table + " has " + ArrayLiteral(t.source_columns) +
                         ": a schema change in the lake is not built; nothing of " + name + " is published");
          return;
        }
        const auto values = ParseArray(rows.Value(i, 8).value_or("{}"));
        std::string unchanged;
        for (const auto& v : ParseArray(rows.Value(i, 9).value_or("{}"))) unchanged += (unchanged.empty() ? "" : ",") + v.value_or("");
        // One cell at a time (an initializer list of variants trips GCC 12's -Wmaybe-uninitialized).
        std::vector<core::CellValue> cells;
        cells.reserve(8 + t.source_columns.size());
        cells.emplace_back(std::in_place_type<std::string>, *rows.Value(i, 1));
        cells.emplace_back(std::in_place_type<std::string>, name);
        cells.emplace_back(std::in_place_type<std::string>, *rows.Value(i, 2));
        cells.emplace_back(std::in_place_type<int64_t>, std::stoll(*rows.Value(i, 3)));
        cells.emplace_back(std::in_place_type<int64_t>, std::stoll(*rows.Value(i, 4)));
        cells.emplace_back(std::in_place_type<int32_t>, std::stoi(*rows.Value(i, 5)));
        cells.emplace_back(std::in_place_type<std::string>, *rows.Value(i, 6));
        if (unchanged.empty()) cells.emplace_back(std::in_place_type<core::NullValue>);
        else cells.emplace_back(std::in_place_type<std::string>, unchanged);
        for (size_t k = 0; k < t.source_columns.size(); k++) {
          if (k < values.size() && values[k]) cells.emplace_back(std::in_place_type<std::string>, *values[k]);
          else cells.emplace_back(std::in_place_type<core::NullValue>);
        }
        if (Status s = writer->AppendRow(cells); !s.ok())
          throw CommandFailed("lake table " + t.table + ", " + name + ": " + s.error().message);
      }
      auto file = std::move(*writer).Finish();
      if (!file) throw CommandFailed("lake table " + t.table + ": " + file.error().message);
      t.file = std::move(*file);
      const std::string address = pilot::Sha256Hex(std::span<const uint8_t>(t.file.bytes.data(), t.file.bytes.size()));
      t.data_key = config_.name + "/" + t.table + "/data/" + name + "-" + address + ".parquet";
      t.data_path = store_->Location(t.data_key);
      addresses.push_back(address);
      tables.push_back(std::move(t));
    }
    const std::set<std::string> include(d.include.begin(), d.include.end());
    const std::string receipt = core::PublicationReceipt(epoch, include, addresses);
    // 1. The data files, durable before anything refers to them (found again when already there).
    for (auto& t : tables) {
      if (store_->PutOnce(t.data_key, t.file.bytes))
        Say(config_, "data_file_found", "epoch=" + name + " path=" + t.data_path);
    }
    if (fault::Hit("lake.after_files_before_pending") == fault::Action::Error)
      throw CommandFailed("injected fault lake.after_files_before_pending");
    // 2. The receipt, pending.
    catalog_.Run("INSERT INTO trellara_lake.epochs (lake, epoch, state, pending_receipt) VALUES ($1, $2, 'open', $3) "
                 "ON CONFLICT (lake, epoch) DO UPDATE SET pending_receipt = EXCLUDED.pending_receipt",
                 {config_.name, std::to_string(epoch), receipt}, "recording the pending receipt of " + name);
    if (fault::Hit("lake.after_pending_before_commit") == fault::Action::Error)
      throw CommandFailed("injected fault lake.after_pending_before_commit");
    // 3. Each table's manifest, manifest list and metadata file.
    const int64_t now_ms = NowMs();
    struct Pointer {
      std::string table, metadata, previous, uuid, columns;
      json snapshots, metadata_log;
      bool exists;
    };
    std::vector<Pointer> pointers;
    for (auto& t : tables) {
      const std::string table_key = config_.name + "/" + t.table;
      const std::string table_receipt = pilot::Sha256Hex(receipt + "/" + t.table);
      const int64_t snapshot_id = core::SnapshotIdOf(table_receipt);
      const int64_t sequence = static_cast<int64_t>(t.snapshots.size()) + 1;
      const std::vector<core::ParquetColumn> columns = TableColumns(t.source_columns);
      core::DataManifest manifest{core::IcebergSchemaJson(columns, 0), 0, snapshot_id,
                                  {core::DataFileEntryOf(t.data_path, t.file)}};
      core::AvroSyncMarker sync{};
      for (size_t i = 0; i < sync.size(); i++) sync[i] = static_cast<uint8_t>(std::stoul(table_receipt.substr(i * 2, 2), nullptr, 16));
      auto manifest_bytes = core::WriteDataManifest(manifest, sync);
      if (!manifest_bytes) throw CommandFailed("lake table " + t.table + ": " + manifest_bytes.error().message);
      const std::string manifest_key = table_key + "/metadata/" + table_receipt.substr(0, 32) + "-m0.avro";
      const std::string manifest_path = store_->Location(manifest_key);
      store_->PutOnce(manifest_key, *manifest_bytes);
      core::ManifestList list;
      list.snapshot_id = snapshot_id;
      if (!t.snapshots.empty()) list.parent_snapshot_id = t.snapshots.back()["snapshot-id"].get<int64_t>();
      list.sequence_number = sequence;
      for (const auto& s : t.snapshots)
        for (const auto& m : s["manifests"])
          list.manifests.push_back({m["path"].get<std::string>(), m["length"].get<int64_t>(), m["sequence"].get<int64_t>(),
                                    m["sequence"].get<int64_t>(), m["snapshot"].get<int64_t>(), m["files"].get<int32_t>(),
                                    m["rows"].get<int64_t>()});
      list.manifests.push_back({manifest_path, static_cast<int64_t>(manifest_bytes->size()), sequence, sequence,
                                snapshot_id, 1, t.file.record_count});
      auto list_bytes = core::WriteManifestList(list, sync);
      if (!list_bytes) throw CommandFailed("lake table " + t.table + ": " + list_bytes.error().message);
      const std::string list_key = table_key + "/metadata/snap-" + std::to_string(snapshot_id) + "-" +
                                   table_receipt.substr(0, 16) + ".avro";
      const std::string list_path = store_->Location(list_key);
      store_->PutOnce(list_key, *list_bytes);
      json snap = {{"snapshot-id", snapshot_id}, {"sequence", sequence}, {"timestamp-ms", now_ms},
                   {"manifest-list", list_path}, {"epoch", name}, {"receipt", receipt}, {"state", std::string(core::EpochStateName(d.state))},
                   {"stores", ArrayLiteral(std::vector<std::string>(include.begin(), include.end()))},
                   {"added-stores", ArrayLiteral(added)}, {"data-file", t.data_path}, {"records", t.file.record_count},
                   {"manifests", json::array({{{"path", manifest_path}, {"length", manifest_bytes->size()},
                                                {"sequence", sequence}, {"snapshot", snapshot_id}, {"files", 1},
                                                {"rows", t.file.record_count}}})}};
      json snapshots = t.snapshots;
      snapshots.push_back(snap);
      core::IcebergTableMetadata md;
      md.table_uuid = t.uuid;
      md.location = store_->Location(table_key);
      md.last_updated_ms = now_ms;
      md.columns = columns;
      md.properties = {{"trellara.lake", config_.name}, {"trellara.source-relation", t.table}};
      for (size_t i = 0; i < snapshots.size(); i++) {
        const json& s = snapshots[i];
        core::IcebergSnapshot is;
        is.snapshot_id = s["snapshot-id"].get<int64_t>();
        if (i > 0) is.parent_snapshot_id = snapshots[i - 1]["snapshot-id"].get<int64_t>();
        is.sequence_number = s["sequence"].get<int64_t>();
        is.timestamp_ms = s["timestamp-ms"].get<int64_t>();
        is.manifest_list = s["manifest-list"].get<std::string>();
        is.summary = {{"operation", "append"},
                      {"added-data-files", "1"},
                      {"added-records", std::to_string(s["records"].get<int64_t>())},
                      {"trellara.epoch", s["epoch"].get<std::string>()},
                      {"trellara.epoch-state", s["state"].get<std::string>()},
                      {"trellara.stores", s["stores"].get<std::string>()},
                      {"trellara.added-stores", s["added-stores"].get<std::string>()},
                      {"trellara.receipt", s["receipt"].get<std::string>()}};
        if (s["state"] == "complete_with_gaps") {
          std::vector<std::string> missing;
          for (const auto& m : d.missing) missing.push_back(m);
          is.summary["trellara.missing-stores"] = ArrayLiteral(missing);
        }
        md.snapshots.push_back(is);
      }
      for (const auto& e : t.metadata_log) md.metadata_log.push_back({e["timestamp-ms"].get<int64_t>(), e["metadata-file"].get<std::string>()});
      PgResult current = catalog_.Run("SELECT metadata_location FROM iceberg_tables WHERE catalog_name = $1 AND "
                                      "table_namespace = $1 AND table_name = $2",
                                      {config_.name, t.table}, "reading the catalog's pointer of " + t.table);
      std::optional<std::string> previous = current.rows() == 1 ? current.Value(0, 0) : std::nullopt;
      json metadata_log = t.metadata_log;
      if (previous) {
        md.metadata_log.push_back({now_ms, *previous});
        metadata_log.push_back({{"timestamp-ms", now_ms}, {"metadata-file", *previous}});
      }
      const std::string text = core::TableMetadataJson(md);
      const std::string metadata_key = table_key + "/metadata/" + std::to_string(sequence) + "-" +
                                       pilot::Sha256Hex(text).substr(0, 32) + ".metadata.json";
      const std::string metadata_path = store_->Location(metadata_key);
      store_->PutOnce(metadata_key, Bytes(text));
      pointers.push_back({t.table, metadata_path, previous.value_or(""), t.uuid, ArrayLiteral(t.source_columns),
                          snapshots, metadata_log, previous.has_value()});
    }
    // 4. One catalog transaction: every table's pointer (only from the one this publication read),
    // the epoch published, the pending receipt cleared.
    // Negative control (tests only): an epoch appended to gets its earlier counts plus its stores'
    // again (incremented, not recomputed from the dedup set).
    const bool increment = !already.empty() && fault::Hit("defect.lake_count_by_increment") == fault::Action::Defect;
    PgResult counts = catalog_.Run(increment
                                       ? "SELECT (SELECT transactions FROM trellara_lake.epochs WHERE lake = $1 AND epoch = $2) + "
                                         "count(*), (SELECT changes FROM trellara_lake.epochs WHERE lake = $1 AND epoch = $2) + "
                                         "coalesce(sum(changes), 0) FROM trellara_lake.transactions "
                                         "WHERE lake = $1 AND epoch = $2 AND store = ANY($3::text[])"
                                       : "SELECT count(*), coalesce(sum(changes), 0) FROM trellara_lake.transactions "
                                         "WHERE lake = $1 AND epoch = $2 AND store = ANY($3::text[])",
                                   {config_.name, std::to_string(epoch),
                                    ArrayLiteral(std::vector<std::string>(include.begin(), include.end()))},
                                   "counting " + name);
    catalog_.Must(catalog_.conn().Exec("BEGIN"), "BEGIN of the catalog commit of " + name);
    for (const auto& p : pointers) {
      PgResult moved = p.exists
          ? catalog_.Run("UPDATE iceberg_tables SET metadata_location = $3, previous_metadata_location = $4 WHERE "
                         "catalog_name = $1 AND table_namespace = $1 AND table_name = $2 AND metadata_location = $4",
                         {config_.name, p.table, p.metadata, p.previous}, "moving the pointer of " + p.table)
          : catalog_.Run("INSERT INTO iceberg_tables VALUES ($1, $1, $2, $3, NULL, 'TABLE') ON CONFLICT DO NOTHING",
                         {config_.name, p.table, p.metadata}, "creating lake table " + p.table);
      if (moved.affected() != 1) {
        catalog_.conn().Exec("ROLLBACK");
        throw CommandFailed("lake table " + p.table + " moved in the catalog while " + name + " was being published "
                            "(another fan-in of lake " + config_.name + "?); nothing was committed; run one fan-in");
      }
      catalog_.Run("INSERT INTO trellara_lake.tables (lake, table_name, table_uuid, source_columns, snapshots, metadata_log) "
                   "VALUES ($1, $2, $3, $4::text[], $5::jsonb, $6::jsonb) ON CONFLICT (lake, table_name) DO UPDATE SET "
                   "snapshots = EXCLUDED.snapshots, metadata_log = EXCLUDED.metadata_log",
                   {config_.name, p.table, p.uuid, p.columns, p.snapshots.dump(), p.metadata_log.dump()},
                   "recording lake table " + p.table);
    }
    std::vector<std::string> included(include.begin(), include.end());
    catalog_.Run("UPDATE trellara_lake.epochs SET state = $3, stores = $4::text[], missing = $5::text[], receipt = $6, "
                 "transactions = $7, changes = $8, pending_receipt = NULL, published_at = now() "
                 "WHERE lake = $1 AND epoch = $2",
                 {config_.name, std::to_string(epoch), std::string(core::EpochStateName(d.state)), ArrayLiteral(included),
                  ArrayLiteral(d.missing), receipt, *counts.Value(0, 0), *counts.Value(0, 1)},
                 "publishing " + name);
    published_with_.clear();
    catalog_.Must(catalog_.conn().Exec("COMMIT"), "COMMIT of the catalog commit of " + name);
    // Fault point (tests): the commit happened and its reply is taken as lost.
    if (fault::Hit("lake.catalog_reply_lost") == fault::Action::Error) {
      unknown_[epoch] = receipt;
      Say(config_, "catalog_reply_lost", "epoch=" + name + " receipt=" + receipt.substr(0, 16) +
                                             " state=pending_catalog_commit (settled by reading the catalog)");
      // Negative control (tests only): the files of a commit of unknown outcome are deleted.
      if (fault::Hit("defect.lake_delete_files_on_unknown_commit") == fault::Action::Defect)
        for (const auto& t : tables) std::filesystem::remove(t.data_path);
      return;
    }
    Say(config_, "published", "epoch=" + name + " state=" + std::string(core::EpochStateName(d.state)) + " " +
                                  core::DescribeCompleteness(d, config_.stores.size()) + " transactions=" +
                                  *counts.Value(0, 0) + " changes=" + *counts.Value(0, 1) + " tables=" +
                                  std::to_string(tables.size()) + " receipt=" + receipt.substr(0, 16));
  }

  const LakeConfig& config_;
  FaninOptions options_;
  Catalog catalog_;
  std::unique_ptr<ObjectStore> store_;
  std::unique_ptr<log::LogDevice> device_;
  std::map<uint64_t, std::string> unknown_;  // epoch -> receipt of a commit whose reply was lost
  ViewsMemory views_memory_;                  // tables refused views, not rebuilt again at the same horizon
  std::map<uint64_t, std::set<std::string>> published_with_;  // epoch -> stores published (a cache; cleared at each commit)
};

}  // namespace

// ---- configuration --------------------------------------------------------------------------

namespace {

// aws_access_key_id and aws_secret_access_key of the [default] profile of an AWS shared credentials
// file (INI: "[profile]" lines, "key = value" lines, '#' and ';' comments).
template <typename Bad>
void ReadCredentialsFile(const std::string& file, LakeS3Config& s3, const Bad& bad) {
  std::ifstream in(file);
  if (!in) throw bad("lake.credentials", "names " + file + ", which cannot be read: " + std::strerror(errno));
  std::string line, profile;
  auto trim = [](std::string v) {
    const size_t b = v.find_first_not_of(" \t\r");
    const size_t e = v.find_last_not_of(" \t\r");
    return b == std::string::npos ? std::string() : v.substr(b, e - b + 1);
  };
  while (std::getline(in, line)) {
    line = trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[') {
      profile = trim(line.substr(1, line.find(']') - 1));
      continue;
    }
    const size_t eq = line.find('=');
    if (profile != "default" || eq == std::string::npos) continue;
    const std::string k = trim(line.substr(0, eq)), v = trim(line.substr(eq + 1));
    if (k == "aws_access_key_id") s3.access_key_id = v;
    else if (k == "aws_secret_access_key") s3.secret_access_key = v;
  }
  if (s3.access_key_id.empty() || s3.secret_access_key.empty())
    throw bad("lake.credentials", "file " + file + " has no aws_access_key_id and aws_secret_access_key under [default]");
}

template <typename Get, typename Bad>
LakeS3Config LoadS3Settings(const std::string& warehouse, const Get& get, const Bad& bad) {
  LakeS3Config s3;
  const std::string rest = warehouse.substr(5);
  const size_t slash = rest.find('/');
  s3.bucket = rest.substr(0, slash);
  if (slash != std::string::npos) s3.prefix = rest.substr(slash + 1);
  while (!s3.prefix.empty() && s3.prefix.back() == '/') s3.prefix.pop_back();
  while (!s3.prefix.empty() && s3.prefix.front() == '/') s3.prefix.erase(0, 1);
  bool bucket_ok = s3.bucket.size() >= 3 && s3.bucket.size() <= 63;
  for (char ch : s3.bucket)
    if (!std::islower(static_cast<unsigned char>(ch)) && !std::isdigit(static_cast<unsigned char>(ch)) && ch != '-' && ch != '.')
      bucket_ok = false;
  if (!bucket_ok)
    throw bad("lake.warehouse", "\"" + warehouse + "\" must be s3://bucket/prefix with a bucket name of 3..63 of [a-z0-9.-]");
  s3.endpoint = get("s3_endpoint").value_or("");
  while (!s3.endpoint.empty() && s3.endpoint.back() == '/') s3.endpoint.pop_back();
  const size_t scheme = s3.endpoint.find("://");
  if ((s3.endpoint.rfind("http://", 0) != 0 && s3.endpoint.rfind("https://", 0) != 0) ||
      s3.endpoint.find('/', scheme + 3) != std::string::npos || s3.endpoint.size() <= scheme + 3)
    throw bad("lake.s3_endpoint", "must be http://host[:port] or https://host[:port] (no path: requests are path-style) "
                                  "for the s3:// warehouse " + warehouse);
  s3.region = get("s3_region").value_or("us-east-1");
  if (s3.region.empty()) throw bad("lake.s3_region", "is empty (the default is us-east-1)");
  const auto key_id = get("s3_access_key_id"), secret = get("s3_secret_access_key"), file = get("credentials");
  if (file) {
    if (key_id || secret)
      throw bad("lake.credentials", "and lake.s3_access_key_id / lake.s3_secret_access_key are both set; keep one");
    ReadCredentialsFile(*file, s3, bad);
  } else {
    if (!key_id || key_id->empty()) throw bad("lake.s3_access_key_id", "is missing (or set lake.credentials)");
    if (!secret || secret->empty()) throw bad("lake.s3_secret_access_key", "is missing (or set lake.credentials)");
    s3.access_key_id = *key_id;
    s3.secret_access_key = *secret;
  }
  return s3;
}

}  // namespace

LakeConfig LoadLakeConfig(const std::string& path) {
  auto bad = [&](const std::string& setting, const std::string& what) -> CommandFailed {
    return CommandFailed("configuration " + path + ": " + setting + " " + what, kExitConfig);
  };
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    throw CommandFailed("configuration " + path + " is not valid TOML at line " + std::to_string(e.source().begin.line) +
                            ": " + std::string(e.description()) + "; it needs [lake] and one [[store]] per store",
                        kExitConfig);
  }
  for (const auto& [key, node] : root) {
    const std::string k(key.str());
    if (k != "lake" && k != "store")
      throw bad("[" + k + "]", "is not a table of a lake configuration; the accepted ones are [lake] and [[store]]");
  }
  const toml::table* lake = root["lake"].as_table();
  if (lake == nullptr) throw bad("[lake]", "is missing");
  static const std::set<std::string> lake_keys = {"name", "warehouse", "catalog", "epoch", "gap_policy", "gap_deadline",
                                                  "commit_skew", "s3_endpoint", "s3_region", "s3_access_key_id",
                                                  "s3_secret_access_key", "credentials"};
  for (const auto& [key, value] : *lake) {
    const std::string k(key.str());
    if (!lake_keys.count(k))
      throw bad("lake." + k, "is not a setting; the accepted ones are lake.name, lake.warehouse, lake.catalog, "
                             "lake.epoch, lake.gap_policy, lake.gap_deadline, lake.commit_skew and, for an s3:// "
                             "warehouse, lake.s3_endpoint, lake.s3_region, lake.s3_access_key_id, "
                             "lake.s3_secret_access_key and lake.credentials");
    if (!value.is_string()) throw bad("lake." + k, "must be a string");
  }
  auto get = [&](const std::string& key) { return (*lake)[key].value<std::string>(); };
  LakeConfig c;
  c.path = path;
  c.name = get("name").value_or("");
  if (c.name.empty() || c.name.size() > 64) throw bad("lake.name", "is missing or longer than 64 characters");
  for (char ch : c.name)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_') throw bad("lake.name", "may hold only letters, digits and _");
  c.warehouse = get("warehouse").value_or("");
  if (c.warehouse.rfind("s3://", 0) == 0) {
    c.s3 = LoadS3Settings(c.warehouse, get, bad);
  } else {
    if (c.warehouse.empty() || c.warehouse.front() != '/')
      throw bad("lake.warehouse", "must be an absolute directory or s3://bucket/prefix");
    for (const char* k : {"s3_endpoint", "s3_region", "s3_access_key_id", "s3_secret_access_key", "credentials"})
      if (get(k)) throw bad(std::string("lake.") + k, "is a setting of an s3:// warehouse; lake.warehouse is a directory");
  }
  c.catalog_conninfo = get("catalog").value_or("");
  if (c.catalog_conninfo.empty()) throw bad("lake.catalog", "is missing (the catalog database's conninfo)");
  auto duration = [&](const std::string& key, const std::string& fallback) {
    auto parsed = core::ParseDurationMicros(get(key).value_or(fallback));
    if (!parsed) throw bad("lake." + key, parsed.error().message);
    return *parsed;
  };
  c.policy.epoch_length_us = duration("epoch", "1h");
  c.policy.gap_deadline_us = duration("gap_deadline", "15m");
  c.commit_skew_us = duration("commit_skew", "5s");
  auto policy = core::ParseGapPolicy(get("gap_policy").value_or("publish_with_gaps"));
  if (!policy) throw bad("lake.gap_policy", policy.error().message);
  c.policy.gaps = *policy;
  const toml::array* stores = root["store"].as_array();
  if (stores == nullptr || stores->empty()) throw bad("[[store]]", "is missing: name every store flow the lake reads");
  std::set<std::string> names;
  for (const auto& node : *stores) {
    const toml::table* t = node.as_table();
    if (t == nullptr) throw bad("[[store]]", "must be tables");
    LakeStoreConfig s;
    for (const auto& [key, value] : *t) {
      const std::string k(key.str());
      if (k != "name" && k != "log_directory") throw bad("store." + k, "is not a setting; a [[store]] has name and log_directory");
      if (!value.is_string()) throw bad("store." + k, "must be a string");
    }
    s.name = (*t)["name"].value<std::string>().value_or("");
    s.log_directory = (*t)["log_directory"].value<std::string>().value_or("");
    if (!log::ValidateConsumerName(s.name).ok()) throw bad("store.name", "\"" + s.name + "\" must be 1..64 of [A-Za-z0-9_.-]");
    if (s.log_directory.empty() || s.log_directory.front() != '/')
      throw bad("store.log_directory", "of store " + s.name + " must be an absolute directory");
    if (!names.insert(s.name).second) throw bad("store.name", "\"" + s.name + "\" is named twice");
    c.stores.push_back(s);
  }
  return c;
}

int RunFanin(const LakeConfig& config, const FaninOptions& options) { return Fanin(config, options).Run(); }

// ---- plan and verify ------------------------------------------------------------------------

nlohmann::json PlanLake(const LakeConfig& config) {
  Catalog catalog(config);
  catalog.Connect();
  catalog.CreateSchema();
  json plan = {{"lake", config.name}, {"epoch_seconds", config.policy.epoch_length_us / core::kMicrosPerSecond},
               {"gap_policy", config.policy.gaps == core::GapPolicy::Wait ? "wait" : "publish_with_gaps"},
               {"gap_deadline_seconds", config.policy.gap_deadline_us / core::kMicrosPerSecond}};
  PgResult stores = catalog.Run("SELECT store, next_offset, through_us FROM trellara_lake.stores WHERE lake = $1 ORDER BY store",
                                {config.name}, "reading the stores");
  std::map<std::string, uint64_t> through;
  json store_rows = json::array();
  for (int i = 0; i < stores.rows(); i++) {
    through[*stores.Value(i, 0)] = std::stoull(*stores.Value(i, 2));
    store_rows.push_back({{"store", *stores.Value(i, 0)}, {"next_offset", std::stoull(*stores.Value(i, 1))},
                          {"through_us", std::stoull(*stores.Value(i, 2))}});
  }
  plan["stores"] = store_rows;
  PgResult epochs = catalog.Run(
      "SELECT e.epoch, coalesce(p.state, 'open'), coalesce(p.stores, '{}'), coalesce(p.quarantined_stores, '{}'), "
      "p.quarantine, p.pending_receipt, p.receipt, p.transactions, p.changes FROM (SELECT DISTINCT epoch FROM "
      "trellara_lake.transactions WHERE lake = $1 UNION SELECT epoch FROM trellara_lake.epochs WHERE lake = $1) e "
      "LEFT JOIN trellara_lake.epochs p ON p.lake = $1 AND p.epoch = e.epoch ORDER BY e.epoch",
      {config.name}, "reading the epochs");
  json rows = json::array();
  std::vector<core::EpochState> states;
  for (int i = 0; i < epochs.rows(); i++) {
    const uint64_t index = std::stoull(*epochs.Value(i, 0));
    core::EpochFacts facts;
    facts.index = index;
    facts.now_us = NowUs();
    const std::string state = *epochs.Value(i, 1);
    facts.quarantined = state == "quarantined";
    if (state == "complete" || state == "complete_with_gaps") {
      facts.published.state = state == "complete" ? core::EpochState::Complete : core::EpochState::CompleteWithGaps;
      facts.published.stores = ParseNameArray(epochs.Value(i, 2));
    }
    facts.commit_pending = epochs.Value(i, 5).has_value();
    const std::set<std::string> q = ParseNameArray(epochs.Value(i, 3));
    for (const auto& s : config.stores) {
      const uint64_t at = through.count(s.name) ? through[s.name] : 0;
      facts.stores.push_back({s.name, at >= config.commit_skew_us ? at - config.commit_skew_us : 0, false, q.count(s.name) > 0});
    }
    core::EpochDecision d = core::DecideEpoch(facts, config.policy);
    // What the catalog holds, not what the next pass will make of it: an epoch ready to publish is
    // still waiting (or still published as before) until its catalog commit.
    core::EpochState shown = d.state;
    if (d.action == core::EpochAction::Publish) {
      shown = facts.published.state == core::EpochState::Open ? core::EpochState::Waiting : facts.published.state;
      d.reason = "ready to publish as " + std::string(core::EpochStateName(d.state)) +
                 ": the fan-in's next pass commits it";
    }
    states.push_back(shown);
    PgResult per = catalog.Run("SELECT store, count(*), sum(changes) FROM trellara_lake.transactions WHERE lake = $1 AND "
                               "epoch = $2 GROUP BY store", {config.name, std::to_string(index)}, "counting an epoch");
    std::map<std::string, std::pair<uint64_t, uint64_t>> counts;
    for (int k = 0; k < per.rows(); k++) counts[*per.Value(k, 0)] = {std::stoull(*per.Value(k, 1)), std::stoull(*per.Value(k, 2))};
    json per_store = json::array();
    auto in = [](const std::vector<std::string>& v, const std::string& s) { return std::find(v.begin(), v.end(), s) != v.end(); };
    for (const auto& s : config.stores) {
      const std::string st = in(d.quarantined, s.name) ? "quarantined" : in(d.complete, s.name) ? "complete" : "missing";
      per_store.push_back({{"store", s.name}, {"state", st}, {"published", facts.published.stores.count(s.name) > 0},
                           {"transactions", counts[s.name].first}, {"changes", counts[s.name].second}});
    }
    json row = {{"epoch", core::EpochName(index)}, {"index", index},
                {"start_us", index * config.policy.epoch_length_us}, {"end_us", (index + 1) * config.policy.epoch_length_us},
                {"state", std::string(core::EpochStateName(shown))},
                {"completeness", core::DescribeCompleteness(d, config.stores.size())}, {"missing", d.missing},
                {"quarantined_stores", d.quarantined}, {"stores", per_store},
                {"published_transactions", epochs.Value(i, 7) ? json(std::stoull(*epochs.Value(i, 7))) : json(nullptr)},
                {"published_changes", epochs.Value(i, 8) ? json(std::stoull(*epochs.Value(i, 8))) : json(nullptr)},
                {"receipt", epochs.Value(i, 6) ? json(*epochs.Value(i, 6)) : json(nullptr)},
                {"pending_receipt", epochs.Value(i, 5) ? json(*epochs.Value(i, 5)) : json(nullptr)},
                {"waits_for", d.reason}};
    if (epochs.Value(i, 4)) row["quarantine"] = *epochs.Value(i, 4);
    rows.push_back(row);
  }
  plan["epochs"] = rows;
  plan["views_complete_through_epoch"] = core::CompleteHorizon(states);
  plan["views"] = DescribeViews(catalog.conn(), config);
  return plan;
}

int VerifyLake(const LakeConfig& config, nlohmann::json& report) {
  Catalog catalog(config);
  catalog.Connect();
  catalog.CreateSchema();
  const std::unique_ptr<ObjectStore> store = OpenObjectStore(config);
  json problems = json::array();
  json epochs_out = json::array();
  // The stores' logs, read again: how many transactions each store committed in each epoch.
  auto device = log::OpenUringDevice();
  if (!device) throw CommandFailed("cannot open io_uring to read the stores' logs: " + device.error().message);
  std::map<std::pair<uint64_t, std::string>, std::pair<uint64_t, uint64_t>> in_logs;
  std::map<std::string, uint64_t> log_first;
  for (const auto& s : config.stores) {
    auto exists = (*device)->Exists(s.log_directory);
    if (!exists || !*exists) continue;
    auto reader = log::LogReader::Open(**device, s.log_directory);
    if (!reader) throw CommandFailed("cannot open the log of store " + s.name + ": " + reader.error().message);
    log_first[s.name] = (*reader)->next_offset();
    TransactionBarrier barrier;
    for (;;) {
      auto r = (*reader)->Next();
      if (!r) throw CommandFailed("cannot read the log of store " + s.name + ": " + r.error().message);
      if (!r->has_value()) break;
      auto fed = barrier.Feed(LogFrame{(**r).offset, (**r).type, (**r).commit_lsn,
                                       std::span<const uint8_t>((**r).payload.data(), (**r).payload.size())});
      if (!fed.ok()) {
        problems.push_back("the log of store " + s.name + " cannot be read past offset " + std::to_string((**r).offset) + ": " +
                           fed.error().message);
        break;
      }
      if (!fed->has_value()) continue;
      const uint64_t e = core::EpochIndexOf(static_cast<uint64_t>((*fed)->commit_time_us), config.policy.epoch_length_us);
      auto& c = in_logs[{e, s.name}];
      c.first++;
      c.second += (*fed)->total_changes;
    }
  }
  PgResult epochs = catalog.Run("SELECT epoch, state, stores, receipt, transactions, changes FROM trellara_lake.epochs "
                                "WHERE lake = $1 AND receipt IS NOT NULL ORDER BY epoch",
                                {config.name}, "reading the published epochs");
  PgResult tables = catalog.Run("SELECT t.table_name, t.snapshots::text, i.metadata_location FROM trellara_lake.tables t "
                                "LEFT JOIN iceberg_tables i ON i.catalog_name = t.lake AND i.table_namespace = t.lake AND "
                                "i.table_name = t.table_name WHERE t.lake = $1",
                                {config.name}, "reading the lake's tables");
  uint64_t files_checked = 0;
  for (int i = 0; i < epochs.rows(); i++) {
    const uint64_t index = std::stoull(*epochs.Value(i, 0));
    const std::string name = core::EpochName(index);
    const std::set<std::string> stores = ParseNameArray(epochs.Value(i, 2));
    const uint64_t transactions = std::stoull(epochs.Value(i, 4).value_or("0"));
    const uint64_t changes = std::stoull(epochs.Value(i, 5).value_or("0"));
    // Counts against the dedup set and against the stores' logs.
    PgResult held = catalog.Run("SELECT count(*), coalesce(sum(changes), 0) FROM trellara_lake.transactions WHERE lake = $1 "
                                "AND epoch = $2 AND store = ANY($3::text[])",
                                {config.name, std::to_string(index), ArrayLiteral(std::vector<std::string>(stores.begin(), stores.end()))},
                                "counting " + name);
    if (std::stoull(*held.Value(0, 0)) != transactions || std::stoull(*held.Value(0, 1)) != changes)
      problems.push_back(name + " says " + std::to_string(transactions) + " transactions / " + std::to_string(changes) +
                         " changes; its dedup set holds " + *held.Value(0, 0) + " / " + *held.Value(0, 1));
    uint64_t log_tx = 0, log_changes = 0;
    bool log_complete = true;
    for (const auto& s : stores) {
      auto c = in_logs.find({index, s});
      if (c != in_logs.end()) {
        log_tx += c->second.first;
        log_changes += c->second.second;
      }
      if (!log_first.count(s) || log_first[s] != 0) log_complete = false;  // reclaimed: cannot count from the log
    }
    if (log_complete && (log_tx != transactions || log_changes != changes))
      problems.push_back(name + " says " + std::to_string(transactions) + " transactions / " + std::to_string(changes) +
                         " changes for its stores; their logs hold " + std::to_string(log_tx) + " / " +
                         std::to_string(log_changes));
    // Every data file of the epoch: there, its content the address its name gives.
    uint64_t rows_in_files = 0;
    for (int t = 0; t < tables.rows(); t++) {
      for (const auto& snap : json::parse(tables.Value(t, 1).value_or("[]"))) {
        if (snap["epoch"] != name) continue;
        const std::string path = snap["data-file"];
        files_checked++;
        const auto data_key = store->KeyOf(path);
        const std::optional<std::string> content = data_key ? store->Get(*data_key) : std::nullopt;
        const std::string file_name = path.substr(path.rfind('/') + 1);
        if (!data_key)
          problems.push_back(name + ": data file " + path + " is not in the warehouse " + config.warehouse);
        else if (!content || content->empty())
          problems.push_back(name + ": data file " + path + " is missing");
        else if (file_name.find(pilot::Sha256Hex(*content)) == std::string::npos)
          problems.push_back(name + ": data file " + path + " does not hold the content its name addresses");
        for (const auto& key : {"manifest-list"}) {
          const std::string location = snap[key].get<std::string>();
          const auto object = store->KeyOf(location);
          if (!object || !store->Exists(*object)) problems.push_back(name + ": " + key + " " + location + " is missing");
        }
        rows_in_files += snap["records"].get<uint64_t>();
      }
    }
    if (rows_in_files != changes)
      problems.push_back(name + " says " + std::to_string(changes) + " changes; its data files hold " +
                         std::to_string(rows_in_files) + " rows");
    epochs_out.push_back({{"epoch", name}, {"state", *epochs.Value(i, 1)}, {"stores", stores.size()},
                          {"transactions", transactions}, {"changes", changes}, {"rows_in_files", rows_in_files},
                          {"logs_checked", log_complete}});
  }
  for (int t = 0; t < tables.rows(); t++) {
    const auto location = tables.Value(t, 2);
    const auto object = location ? store->KeyOf(*location) : std::nullopt;
    if (!object || !store->Exists(*object))
      problems.push_back("lake table " + *tables.Value(t, 0) + ": the catalog's metadata file " + location.value_or("(none)") +
                         " is missing");
  }
  const json views = VerifyViews(catalog.conn(), *store, config, problems);
  report = {{"lake", config.name}, {"epochs", epochs_out}, {"data_files_checked", files_checked}, {"views", views},
            {"problems", problems}, {"agrees", problems.empty()}};
  return problems.empty() ? 0 : 1;
}

}  // namespace trellara::cli::lake
