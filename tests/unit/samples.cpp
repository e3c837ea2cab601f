// samples.cpp — builds the deterministic sample records declared in samples.h.
#include "samples.h"

#include <cassert>

#include "trellara/record/checksum.h"
#include "trellara/record/codec.h"

namespace trellara::testing {

namespace {
TxIdentity SampleTx() { return TxIdentity{"app", 7301234567890123456ull, 7421, 0x3A1F2B0}; }
}  // namespace

RelationInfo SampleOrders() {
  RelationInfo r;
  r.oid = 16384;
  r.schema = "public";
  r.name = "orders";
  r.replica_identity = ReplicaIdentity::Default;
  r.columns = {{"id", 20, "bigint", -1, true},
               {"note", 25, "text", -1, false},
               {"amount", 1700, "numeric(12,2)", 786438, false},
               {"doc", 25, "text", -1, false}};
  r.fingerprint = ComputeFingerprint(r);
  return r;
}

RelationInfo SampleLineItems() {
  RelationInfo r;
  r.oid = 16400;
  r.schema = "Sales";
  r.name = "line \"items\"";
  r.replica_identity = ReplicaIdentity::Full;
  r.columns = {{"order_id", 20, "bigint", -1, true}, {"line", 23, "integer", -1, true}, {"qty", 23, "integer", -1, false}};
  r.fingerprint = ComputeFingerprint(r);
  return r;
}

Envelope SampleEnvelope() {
  Envelope e;
  e.tx = SampleTx();
  e.begin_lsn = 0x3A1F000;
  e.commit_time_us = 1796000000123456;  // 2026-11-30T...Z
  e.relations = {SampleOrders(), SampleLineItems()};
  Change ins;
  ins.op = Op::Insert;
  ins.relation_oid = 16384;
  ins.new_tuple = {Value::Text("42"), Value::Text("tab\there \"quoted\" back\\slash\nnewline ünïcödé"),
                   Value::Text("NaN"), Value::Null()};
  Change empty_vs_null = ins;
  empty_vs_null.new_tuple = {Value::Text("43"), Value::Text(""), Value::Text("-0"), Value::Null()};
  Change upd;
  upd.op = Op::Update;
  upd.relation_oid = 16384;
  upd.new_tuple = {Value::Text("42"), Value::Text("changed"), Value::Text("Infinity"), Value::UnchangedToast()};
  Change key_upd;
  key_upd.op = Op::Update;
  key_upd.relation_oid = 16384;
  key_upd.old_image = OldImage::Key;
  key_upd.old_tuple = {Value::Text("43")};
  key_upd.new_tuple = {Value::Text("44"), Value::Text(""), Value::Text("1.50"), Value::Null()};
  Change full_del;
  full_del.op = Op::Delete;
  full_del.relation_oid = 16400;
  full_del.old_image = OldImage::Full;
  full_del.old_tuple = {Value::Text("42"), Value::Text("1"), Value::Null()};
  Change bin_ins;
  bin_ins.op = Op::Insert;
  bin_ins.relation_oid = 16400;
  bin_ins.new_tuple = {Value::Text("42"), Value::Text("2"), Value::Binary(std::string("\x00\x01\xff", 3))};
  Change del;
  del.op = Op::Delete;
  del.relation_oid = 16384;
  del.old_image = OldImage::Key;
  del.old_tuple = {Value::Text("44")};
  Change trunc;
  trunc.op = Op::Truncate;
  trunc.truncate = TruncateInfo{{16400, 16384}, true, false};
  Change msg;
  msg.op = Op::Message;
  msg.message = LogicalMessage{true, "app.audit", std::string("bin\x00\xfe", 5)};
  Change ddl;
  ddl.op = Op::Ddl;
  ddl.ddl.command_tag = "ALTER TABLE";
  ddl.ddl.object_type = "table";
  ddl.ddl.schema = "public";
  ddl.ddl.object_identity = "public.orders";
  ddl.ddl.sql = "ALTER TABLE orders ADD COLUMN x int";
  ddl.ddl.relation_schema = "public";
  ddl.ddl.relation_name = "orders";
  ddl.ddl.steps = {DdlStep{DdlStepKind::AddColumn, "x", "", "ADD COLUMN x integer", false}};
  e.changes = {ins, empty_vs_null, upd, key_upd, bin_ins, full_del, del, trunc, msg, ddl};
  Status sealed = SealEnvelope(e);
  assert(sealed.ok());
  (void)sealed;
  return e;
}

Chunk SampleChunk(uint32_t seq) {
  Chunk c;
  c.tx = SampleTx();
  c.seq = seq;
  c.relations = {SampleOrders()};
  for (int i = 0; i < 3; i++) {
    Change ins;
    ins.op = Op::Insert;
    ins.relation_oid = 16384;
    ins.new_tuple = {Value::Text(std::to_string(seq * 100 + i)), Value::Text("row"), Value::Text("0.00"), Value::Null()};
    c.changes.push_back(ins);
  }
  Status sealed = SealChunk(c);
  assert(sealed.ok());
  (void)sealed;
  return c;
}

Manifest SampleManifest() {
  Manifest m;
  m.tx = SampleTx();
  m.begin_lsn = 0x3A1F000;
  m.commit_time_us = 1796000000123456;
  m.relations = {SampleOrders()};
  ChangeHasher total;
  for (uint32_t seq = 0; seq < 2; seq++) {
    Chunk c = SampleChunk(seq);
    m.chunks.push_back(ChunkRef{c.seq, c.partition_id, c.event_count, c.checksum});
    for (const auto& ch : c.changes) {
      total.Add(ch, &c.relations[0], c.relations);
      CountChange(ch, m.counts);
    }
    m.total_changes += c.event_count;
  }
  m.checksum = total.Finish();
  m.boundary_mode = BoundaryMode::StrictChunk;
  return m;
}

CommitMarker SampleCommitMarker() {
  CommitMarker k;
  k.tx = SampleTx();
  auto bytes = EncodeRecord(Record(SampleManifest()));
  assert(bytes.ok());
  k.manifest_checksum = Sha256Of(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size()));
  k.total_changes = 6;
  k.total_chunks = 2;
  return k;
}

}  // namespace trellara::testing
