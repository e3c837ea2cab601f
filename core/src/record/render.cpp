// render.cpp — JSON and text renderings of a record, for operators, tools and tests.
//
// Renders exactly what the record holds: every value keeps its kind (null, text, binary,
// unchanged-TOAST), bytes that are not UTF-8 are shown as hex under "text_hex", and the
// checksum status is recomputed, never assumed. Never modifies or filters a record.
#include "trellara/record/render.h"

#include <ctime>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "trellara/record/codec.h"
#include "trellara/base/text.h"

namespace trellara {

namespace {

using nlohmann::ordered_json;

bool IsUtf8(const std::string& s) { return IsValidUtf8(s); }

std::string Hex(const std::string& s) {
  return HexEncode(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

// Identifiers and other strings from a non-UTF-8 source database are shown as \x<hex>.
std::string Name(const std::string& s) { return IsUtf8(s) ? s : "\\x" + Hex(s); }

std::string FormatTime(int64_t us) {
  time_t secs = static_cast<time_t>(us / 1000000);
  int64_t frac = us % 1000000;
  if (frac < 0) {
    frac += 1000000;
    secs -= 1;
  }
  struct tm tm {};
  gmtime_r(&secs, &tm);
  char buf[64];
  size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof buf - n, ".%06lldZ", static_cast<long long>(frac));
  return buf;
}

ordered_json ValueJson(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Null: return nullptr;
    case Value::Kind::Text:
      if (IsUtf8(v.data)) return v.data;
      return ordered_json{{"text_hex", Hex(v.data)}};
    case Value::Kind::Binary: return ordered_json{{"binary_hex", Hex(v.data)}};
    case Value::Kind::UnchangedToast: return ordered_json{{"unchanged_toast", true}};
  }
  return nullptr;
}

std::string QualifiedName(const RelationInfo& r) { return Name(r.schema) + "." + Name(r.name); }

const RelationInfo* RelationByOid(const std::vector<RelationInfo>& rels, uint32_t oid) {
  for (const auto& r : rels)
    if (r.oid == oid) return &r;
  return nullptr;
}

ordered_json TxJson(const TxIdentity& tx) {
  return ordered_json{{"flow", Name(tx.flow)},
                      {"origin_sysid", std::to_string(tx.origin_sysid)},
                      {"xid", tx.xid},
                      {"commit_lsn", FormatLsn(tx.commit_lsn)}};
}

ordered_json RelationsJson(const std::vector<RelationInfo>& rels) {
  ordered_json out = ordered_json::array();
  for (const auto& r : rels) {
    ordered_json cols = ordered_json::array();
    for (const auto& c : r.columns)
      cols.push_back({{"name", Name(c.name)}, {"type", Name(c.type_name)}, {"type_oid", c.type_oid},
                      {"typmod", c.typmod}, {"key", c.is_key}});
    out.push_back({{"oid", r.oid},
                   {"schema", Name(r.schema)},
                   {"name", Name(r.name)},
                   {"replica_identity", ReplicaIdentityName(r.replica_identity)},
                   {"fingerprint", HexEncode(r.fingerprint)},
                   {"columns", cols}});
  }
  return out;
}

// Tuple as an object keyed by column name; `key_only` maps values onto the key columns.
ordered_json TupleJson(const std::vector<Value>& values, const RelationInfo& rel, bool key_only) {
  ordered_json out = ordered_json::object();
  size_t vi = 0;
  for (const auto& c : rel.columns) {
    if (key_only && !c.is_key) continue;
    if (vi >= values.size()) break;
    out[Name(c.name)] = ValueJson(values[vi++]);
  }
  return out;
}

ordered_json ChangesJson(const std::vector<Change>& changes, const std::vector<RelationInfo>& rels) {
  ordered_json out = ordered_json::array();
  for (const auto& c : changes) {
    ordered_json j{{"op", OpName(c.op)}};
    const RelationInfo* rel = RelationByOid(rels, c.relation_oid);
    switch (c.op) {
      case Op::Insert:
      case Op::Update:
      case Op::Delete:
        if (rel == nullptr) break;  // DecodeRecord guarantees resolution; model built in code may not
        j["relation"] = QualifiedName(*rel);
        if (c.old_image != OldImage::None) {
          j["old_image"] = OldImageName(c.old_image);
          j["old"] = TupleJson(c.old_tuple, *rel, c.old_image == OldImage::Key);
        }
        if (c.op != Op::Delete) j["new"] = TupleJson(c.new_tuple, *rel, false);
        break;
      case Op::Truncate: {
        ordered_json names = ordered_json::array();
        for (uint32_t oid : c.truncate.relation_oids) {
          const RelationInfo* r = RelationByOid(rels, oid);
          names.push_back(r ? QualifiedName(*r) : std::to_string(oid));
        }
        j["relations"] = names;
        j["cascade"] = c.truncate.cascade;
        j["restart_identity"] = c.truncate.restart_identity;
        break;
      }
      case Op::Message:
        j["transactional"] = c.message.transactional;
        j["prefix"] = Name(c.message.prefix);
        if (IsUtf8(c.message.content))
          j["content"] = c.message.content;
        else
          j["content_hex"] = Hex(c.message.content);
        break;
      case Op::Ddl:
        j["command_tag"] = Name(c.ddl.command_tag);
        j["object_type"] = Name(c.ddl.object_type);
        j["schema"] = Name(c.ddl.schema);
        j["object_identity"] = Name(c.ddl.object_identity);
        j["sql"] = Name(c.ddl.sql);
        if (c.ddl.relation_oid != 0) j["relation_oid"] = c.ddl.relation_oid;
        if (!c.ddl.relation_name.empty()) j["relation"] = Name(c.ddl.relation_schema) + "." + Name(c.ddl.relation_name);
        {
          nlohmann::ordered_json steps = nlohmann::ordered_json::array();
          for (const auto& st : c.ddl.steps) {
            nlohmann::ordered_json sj;
            sj["kind"] = DdlStepKindName(st.kind);
            if (!st.column.empty()) sj["column"] = Name(st.column);
            if (!st.new_name.empty()) sj["new_name"] = Name(st.new_name);
            if (!st.detail.empty()) sj["detail"] = Name(st.detail);
            if (st.using_expression) sj["using_expression"] = true;
            if (!st.label.empty()) sj["label"] = Name(st.label);
            if (st.kind == DdlStepKind::EnumAddValue && !st.label.empty()) sj["before"] = st.before;
            steps.push_back(std::move(sj));
          }
          j["steps"] = std::move(steps);
        }
        if (c.ddl.definition) {
          const auto& d = *c.ddl.definition;
          nlohmann::ordered_json dj;
          dj["relation"] = Name(d.schema) + "." + Name(d.name);
          dj["relkind"] = d.relkind;
          nlohmann::ordered_json cols = nlohmann::ordered_json::array();
          for (const auto& col : d.columns) {
            nlohmann::ordered_json cj;
            cj["name"] = Name(col.name);
            cj["type"] = Name(col.type_name);
            cj["not_null"] = col.not_null;
            if (!col.default_expr.empty()) {
              cj["default"] = Name(col.default_expr);
              cj["default_kind"] = col.default_kind == DefaultKind::Immutable ? "immutable" : "mutable";
            }
            if (!col.generated.empty()) cj["generated"] = Name(col.generation_expr);
            if (!col.identity.empty()) cj["identity"] = col.identity == "a" ? "always" : "by default";
            cols.push_back(std::move(cj));
          }
          dj["columns"] = std::move(cols);
          nlohmann::ordered_json pk = nlohmann::ordered_json::array();
          for (const auto& k : d.primary_key) pk.push_back(Name(k));
          dj["primary_key"] = std::move(pk);
          dj["replica_identity"] = ReplicaIdentityName(d.replica_identity);
          j["definition"] = std::move(dj);
        }
        break;
    }
    out.push_back(std::move(j));
  }
  return out;
}

ordered_json CountsJson(const std::vector<RelationCount>& counts, const std::vector<RelationInfo>& rels) {
  ordered_json out = ordered_json::array();
  for (const auto& c : counts) {
    const RelationInfo* r = RelationByOid(rels, c.relation_oid);
    out.push_back({{"relation", r ? QualifiedName(*r) : std::to_string(c.relation_oid)},
                   {"inserts", c.inserts},
                   {"updates", c.updates},
                   {"deletes", c.deletes},
                   {"truncates", c.truncates}});
  }
  return out;
}

ordered_json RecordJson(const Record& record) {
  ordered_json j{{"type", RecordTypeName(TypeOf(record))}, {"format_version", kFormatVersion}};
  j["tx"] = TxJson(TxOf(record));
  Status verified = VerifyRecordChecksum(record);
  std::string status = verified.ok() ? "match" : "mismatch";
  if (const auto* e = std::get_if<Envelope>(&record)) {
    j["begin_lsn"] = FormatLsn(e->begin_lsn);
    j["commit_time"] = FormatTime(e->commit_time_us);
    j["boundary_mode"] = BoundaryModeName(e->boundary_mode);
    j["change_count"] = e->changes.size();
    j["counts"] = CountsJson(e->counts, e->relations);
    j["relations"] = RelationsJson(e->relations);
    j["changes"] = ChangesJson(e->changes, e->relations);
    j["checksum"] = HexEncode(e->checksum);
  } else if (const auto* c = std::get_if<Chunk>(&record)) {
    j["seq"] = c->seq;
    j["partition_id"] = c->partition_id;
    if (!c->positions.empty()) {  // partitioned: its place among its partition's chunks, and in the source order
      j["partition_seq"] = c->partition_seq;
      j["positions"] = c->positions;
    }
    j["event_count"] = c->event_count;
    j["relations"] = RelationsJson(c->relations);
    j["changes"] = ChangesJson(c->changes, c->relations);
    j["checksum"] = HexEncode(c->checksum);
  } else if (const auto* m = std::get_if<Manifest>(&record)) {
    j["begin_lsn"] = FormatLsn(m->begin_lsn);
    j["commit_time"] = FormatTime(m->commit_time_us);
    j["boundary_mode"] = BoundaryModeName(m->boundary_mode);
    const bool partitioned = m->boundary_mode == BoundaryMode::Partitioned;
    if (partitioned) {
      j["map_version"] = m->map_version;
      j["partitions"] = m->partitions;
    }
    j["total_changes"] = m->total_changes;
    ordered_json chunks = ordered_json::array();
    for (const auto& ref : m->chunks) {
      ordered_json entry = {{"seq", ref.seq}, {"partition_id", ref.partition_id}};
      if (partitioned) entry["partition_seq"] = ref.partition_seq;
      entry["event_count"] = ref.event_count;
      entry["checksum"] = HexEncode(ref.checksum);
      chunks.push_back(entry);
    }
    j["chunks"] = chunks;
    j["counts"] = CountsJson(m->counts, m->relations);
    j["relations"] = RelationsJson(m->relations);
    j["checksum"] = HexEncode(m->checksum);
    if (verified.ok()) status = "n/a";  // binds to the chunks; checked by the barrier
  } else {
    const auto& k = std::get<CommitMarker>(record);
    j["total_changes"] = k.total_changes;
    j["total_chunks"] = k.total_chunks;
    j["manifest_checksum"] = HexEncode(k.manifest_checksum);
    status = "n/a";
  }
  j["checksum_status"] = status;
  if (!verified.ok()) j["checksum_detail"] = EscapeInvalidUtf8(verified.error().message);
  return j;
}

std::string TupleText(const std::vector<Value>& values, const RelationInfo& rel, bool key_only) {
  std::ostringstream out;
  size_t vi = 0;
  bool first = true;
  for (const auto& c : rel.columns) {
    if (key_only && !c.is_key) continue;
    if (vi >= values.size()) break;
    const Value& v = values[vi++];
    out << (first ? "" : " ") << Name(c.name) << "=";
    first = false;
    switch (v.kind) {
      case Value::Kind::Null: out << "NULL"; break;
      case Value::Kind::UnchangedToast: out << "<unchanged-toast>"; break;
      case Value::Kind::Binary: out << "\\x" << Hex(v.data); break;
      case Value::Kind::Text: out << ordered_json(IsUtf8(v.data) ? v.data : "\\x" + Hex(v.data)).dump(); break;
    }
  }
  return out.str();
}

}  // namespace

Result<std::string> RenderRecordJson(const Record& record, bool pretty) {
  try {
    return RecordJson(record).dump(pretty ? 2 : -1);
  } catch (const std::exception& e) {
    return MakeError(std::string("cannot render record as JSON: ") + e.what());
  }
}

Result<std::string> RenderRecordText(const Record& record) {
  try {
    ordered_json j = RecordJson(record);
    std::ostringstream out;
    const TxIdentity& tx = TxOf(record);
    out << "record:          " << RecordTypeName(TypeOf(record)) << " (format " << kFormatVersion << ")\n"
        << "transaction:     xid " << tx.xid << ", commit " << FormatLsn(tx.commit_lsn) << ", flow "
        << (tx.flow.empty() ? "(none)" : Name(tx.flow)) << ", origin sysid " << tx.origin_sysid << "\n";
    auto changes_text = [&out](const std::vector<Change>& changes, const std::vector<RelationInfo>& rels) {
      out << "changes:         " << changes.size() << "\n";
      for (size_t i = 0; i < changes.size(); i++) {
        const Change& c = changes[i];
        out << "  " << (i + 1) << ". " << OpName(c.op);
        const RelationInfo* rel = RelationByOid(rels, c.relation_oid);
        if (rel != nullptr && (c.op == Op::Insert || c.op == Op::Update || c.op == Op::Delete)) {
          out << " " << QualifiedName(*rel);
          if (c.old_image != OldImage::None)
            out << " old(" << OldImageName(c.old_image) << "): " << TupleText(c.old_tuple, *rel, c.old_image == OldImage::Key);
          if (c.op != Op::Delete) out << " new: " << TupleText(c.new_tuple, *rel, false);
        } else if (c.op == Op::Truncate) {
          for (uint32_t oid : c.truncate.relation_oids) {
            const RelationInfo* r = RelationByOid(rels, oid);
            out << " " << (r ? QualifiedName(*r) : std::to_string(oid));
          }
          if (c.truncate.cascade) out << " CASCADE";
          if (c.truncate.restart_identity) out << " RESTART IDENTITY";
        } else if (c.op == Op::Message) {
          out << " prefix=" << ordered_json(Name(c.message.prefix)).dump() << " (" << c.message.content.size() << " bytes)";
        } else if (c.op == Op::Ddl) {
          out << " " << Name(c.ddl.command_tag) << " " << Name(c.ddl.object_identity);
        }
        out << "\n";
      }
    };
    auto tables_text = [&out](const ordered_json& counts) {
      out << "affected tables: ";
      if (counts.empty()) out << "(none)";
      bool first = true;
      for (const auto& c : counts) {
        out << (first ? "" : ", ") << c["relation"].get<std::string>() << " (+" << c["inserts"].get<uint64_t>() << " ~"
            << c["updates"].get<uint64_t>() << " -" << c["deletes"].get<uint64_t>() << " truncate "
            << c["truncates"].get<uint64_t>() << ")";
        first = false;
      }
      out << "\n";
    };
    if (const auto* e = std::get_if<Envelope>(&record)) {
      out << "begin lsn:       " << FormatLsn(e->begin_lsn) << "\n"
          << "commit time:     " << FormatTime(e->commit_time_us) << "\n"
          << "boundary mode:   " << BoundaryModeName(e->boundary_mode) << "\n";
      tables_text(j["counts"]);
      changes_text(e->changes, e->relations);
    } else if (const auto* c = std::get_if<Chunk>(&record)) {
      out << "chunk:           seq " << c->seq << ", partition " << c->partition_id;
      if (!c->positions.empty())
        out << " (its chunk " << c->partition_seq << "), source positions " << c->positions.front() << ".."
            << c->positions.back();
      out << ", " << c->event_count << " events\n";
      changes_text(c->changes, c->relations);
    } else if (const auto* m = std::get_if<Manifest>(&record)) {
      out << "begin lsn:       " << FormatLsn(m->begin_lsn) << "\n"
          << "commit time:     " << FormatTime(m->commit_time_us) << "\n"
          << "boundary mode:   " << BoundaryModeName(m->boundary_mode) << "\n";
      if (m->boundary_mode == BoundaryMode::Partitioned)
        out << "partition map:   version " << m->map_version << ", " << m->partitions << " partitions\n";
      out << "total changes:   " << m->total_changes << " in " << m->chunks.size() << " chunks\n";
      tables_text(j["counts"]);
      for (const auto& ref : m->chunks) {
        out << "  chunk " << ref.seq << ": ";
        if (m->boundary_mode == BoundaryMode::Partitioned)
          out << "partition " << ref.partition_id << " (its chunk " << ref.partition_seq << "), ";
        out << ref.event_count << " events, checksum " << HexEncode(ref.checksum) << "\n";
      }
    } else {
      const auto& k = std::get<CommitMarker>(record);
      out << "totals:          " << k.total_changes << " changes in " << k.total_chunks << " chunks\n"
          << "manifest sha256: " << HexEncode(k.manifest_checksum) << "\n";
    }
    if (j.contains("checksum")) out << "checksum:        " << j["checksum"].get<std::string>() << "\n";
    out << "checksum status: " << j["checksum_status"].get<std::string>();
    if (j.contains("checksum_detail")) out << " — " << j["checksum_detail"].get<std::string>();
    out << "\n";
    return out.str();
  } catch (const std::exception& e) {
    return MakeError(std::string("cannot render record as text: ") + e.what());
  }
}

}  // namespace trellara
