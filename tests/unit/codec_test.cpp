// codec_test.cpp — envelope codec: round trips, canonical checksum stability and sensitivity,
// hostile input (truncated, oversized, garbage, randomly mutated), rendering, and the committed
// fixtures used by pg_regress and the demo.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "samples.h"
#include "trellara/record/checksum.h"
#include "trellara/record/codec.h"
#include "trellara/log/crc32c.h"
#include "trellara/record/render.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_codec_test {

using namespace trellara;
using namespace trellara::testing;

namespace {

std::string Encode(const Record& r) {
  auto bytes = EncodeRecord(r);
  REQUIRE(bytes.ok());
  return *bytes;
}

Sha256 ChecksumOf(const Envelope& e) {
  auto sum = ComputeChangesChecksum(e.changes, e.relations);
  REQUIRE(sum.ok());
  return *sum;
}

std::string FromHex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

}  // namespace

TEST_CASE("crc32c_matches_the_castagnoli_check_value", "[codec]") {
  CHECK(Crc32c("123456789", 9) == 0xE3069283u);
  // Extending a CRC equals computing it at once.
  CHECK(Crc32c("56789", 5, Crc32c("1234", 4)) == 0xE3069283u);
  CHECK(Crc32c("", 0) == 0u);
}

TEST_CASE("codec_round_trips_every_op_and_value_kind", "[codec]") {
  Envelope e = SampleEnvelope();
  // The sample covers every op and every value kind; assert it so the test cannot silently shrink.
  std::set<Op> ops;
  std::set<Value::Kind> kinds;
  std::set<OldImage> images;
  for (const auto& c : e.changes) {
    ops.insert(c.op);
    images.insert(c.old_image);
    for (const auto& v : c.new_tuple) kinds.insert(v.kind);
    for (const auto& v : c.old_tuple) kinds.insert(v.kind);
  }
  CHECK(ops.size() == 6);
  CHECK(kinds.size() == 4);
  CHECK(images.size() == 3);

  for (const Record& r : {Record(e), Record(SampleChunk(0)), Record(SampleManifest()), Record(SampleCommitMarker())}) {
    std::string bytes = Encode(r);
    auto back = DecodeRecord(bytes);
    INFO(RecordTypeName(TypeOf(r)));
    REQUIRE(back.ok());
    CHECK(*back == r);
    CHECK(VerifyRecordChecksum(*back).ok());
    CHECK(Encode(*back) == bytes);
  }
}

TEST_CASE("unchanged_toast_is_distinct_from_null_and_empty_text", "[codec]") {
  Envelope e = SampleEnvelope();
  Envelope toast = e, null = e, empty = e;
  toast.changes[2].new_tuple[3] = Value::UnchangedToast();
  null.changes[2].new_tuple[3] = Value::Null();
  empty.changes[2].new_tuple[3] = Value::Text("");
  CHECK(ChecksumOf(toast) != ChecksumOf(null));
  CHECK(ChecksumOf(null) != ChecksumOf(empty));
  CHECK(ChecksumOf(toast) != ChecksumOf(empty));
  REQUIRE(SealEnvelope(null).ok());
  auto back = DecodeRecord(Encode(null));
  REQUIRE(back.ok());
  CHECK(std::get<Envelope>(*back).changes[2].new_tuple[3].kind == Value::Kind::Null);
  auto json = RenderRecordJson(Record(e));
  REQUIRE(json.ok());
  CHECK(json->find("\"doc\":{\"unchanged_toast\":true}") != std::string::npos);
}

TEST_CASE("checksum_is_stable_for_the_same_content", "[codec]") {
  // Built twice independently: same content, same bytes, same checksum.
  Envelope a = SampleEnvelope(), b = SampleEnvelope();
  CHECK(Encode(Record(a)) == Encode(Record(b)));
  CHECK(a.checksum == b.checksum);
  // Relation metadata order and unrelated envelope fields do not change the change checksum.
  Envelope c = a;
  std::swap(c.relations[0], c.relations[1]);
  c.commit_time_us += 1;
  CHECK(ChecksumOf(c) == a.checksum);
  // The streamed hasher over chunks equals the one-shot checksum of the same changes.
  Envelope whole;
  whole.relations = {SampleOrders()};
  for (uint32_t s = 0; s < 2; s++)
    for (auto& ch : SampleChunk(s).changes) whole.changes.push_back(ch);
  CHECK(ChecksumOf(whole) == SampleManifest().checksum);
}

TEST_CASE("checksum_changes_with_any_value_column_op_or_order", "[codec]") {
  const Envelope base = SampleEnvelope();
  const Sha256 sum = base.checksum;
  SECTION("a value") {
    Envelope e = base;
    e.changes[0].new_tuple[1].data += "x";
    CHECK(ChecksumOf(e) != sum);
  }
  SECTION("a value kind (text vs binary of the same bytes)") {
    Envelope e = base;
    e.changes[0].new_tuple[0].kind = Value::Kind::Binary;
    CHECK(ChecksumOf(e) != sum);
  }
  SECTION("a column name") {
    Envelope e = base;
    e.relations[0].columns[1].name = "notes";
    e.relations[0].fingerprint = ComputeFingerprint(e.relations[0]);
    CHECK(ChecksumOf(e) != sum);
  }
  SECTION("a column type") {
    Envelope e = base;
    e.relations[0].columns[2].type_name = "numeric(14,2)";
    e.relations[0].fingerprint = ComputeFingerprint(e.relations[0]);
    CHECK(ChecksumOf(e) != sum);
  }
  SECTION("the key") {
    Envelope e = base;
    e.relations[0].columns[1].is_key = true;
    CHECK(ComputeFingerprint(e.relations[0]) != base.relations[0].fingerprint);
  }
  SECTION("an op") {
    Envelope e = base;
    e.changes[6].op = Op::Update;
    e.changes[6].new_tuple = {Value::Text("44"), Value::Null(), Value::Null(), Value::Null()};
    CHECK(ChecksumOf(e) != sum);
  }
  SECTION("the order of changes") {
    Envelope e = base;
    std::swap(e.changes[0], e.changes[1]);
    CHECK(ChecksumOf(e) != sum);
  }
  SECTION("the order of values across a boundary") {
    Envelope e = base;
    // "ab" + "" must not hash like "a" + "b": lengths are part of the encoding.
    e.changes[1].new_tuple[1] = Value::Text("x");
    Envelope f = base;
    f.changes[1].new_tuple[1] = Value::Text("");
    f.changes[1].new_tuple[0].data += "x";
    CHECK(ChecksumOf(e) != ChecksumOf(f));
  }
  SECTION("truncate flags") {
    Envelope e = base;
    e.changes[7].truncate.cascade = false;
    CHECK(ChecksumOf(e) != sum);
  }
}

TEST_CASE("decode_rejects_empty_truncated_and_oversized_input_with_a_reason", "[codec][hostile]") {
  std::string bytes = Encode(Record(SampleEnvelope()));
  auto empty = DecodeRecord(std::string());
  REQUIRE_FALSE(empty.ok());
  CHECK(empty.error().message.find("empty") != std::string::npos);
  for (size_t len = 1; len < bytes.size(); len++) {
    auto r = DecodeRecord(bytes.substr(0, len));
    INFO("prefix length " << len);
    REQUIRE_FALSE(r.ok());
    CHECK_FALSE(r.error().message.empty());
  }
  std::vector<uint8_t> huge(kMaxRecordBytes + 1, 0x0a);
  auto big = DecodeRecord(std::span<const uint8_t>(huge));
  REQUIRE_FALSE(big.ok());
  CHECK(big.error().message.find("limit") != std::string::npos);
}

TEST_CASE("decode_rejects_structurally_invalid_records_naming_the_problem", "[codec][hostile]") {
  auto expect_error = [](Envelope e, const std::string& fragment) {
    auto bytes = EncodeRecord(Record(e));
    REQUIRE(bytes.ok());
    auto r = DecodeRecord(*bytes);
    REQUIRE_FALSE(r.ok());
    INFO(r.error().message);
    CHECK(r.error().message.find(fragment) != std::string::npos);
  };
  Envelope e = SampleEnvelope();
  SECTION("change refers to a relation the record does not describe") {
    e.changes[0].relation_oid = 999;
    expect_error(e, "no RelationInfo");
  }
  SECTION("tuple narrower than the relation") {
    e.changes[0].new_tuple.pop_back();
    // The whole name of the change, built only when a check fails.
    expect_error(e, "change 0 (insert) on public.orders new tuple has 3 values, expected 4");
  }
  SECTION("unchanged toast in an insert") {
    e.changes[0].new_tuple[3] = Value::UnchangedToast();
    expect_error(e, "change 0 (insert) on public.orders new tuple value 3 is marked unchanged-TOAST");
  }
  SECTION("missing checksum") {
    auto bytes = EncodeRecord(Record(e));
    REQUIRE(bytes.ok());
    e.checksum = Sha256{};
    // A zero checksum is well-formed; the checksum verification catches it.
    auto r = DecodeRecord(*EncodeRecord(Record(e)));
    REQUIRE(r.ok());
    CHECK_FALSE(VerifyRecordChecksum(*r).ok());
  }
  SECTION("commit lsn zero") {
    e.tx.commit_lsn = 0;
    expect_error(e, "commit LSN 0/0");
  }
  SECTION("truncate of an undescribed relation") {
    e.changes[7].truncate.relation_oids.push_back(777);
    expect_error(e, "truncates relation oid 777");
  }
}

TEST_CASE("decode_survives_random_garbage", "[codec][hostile]") {
  const uint32_t seed = Catch::rngSeed() ? Catch::rngSeed() : 20261129u;
  std::mt19937 rng(seed);
  INFO("seed " << seed);
  size_t accepted = 0;
  for (int i = 0; i < 20000; i++) {
    std::string garbage(rng() % 512, '\0');
    for (auto& ch : garbage) ch = static_cast<char>(rng());
    auto r = DecodeRecord(garbage);
    if (r.ok()) {
      accepted++;
      CHECK(RenderRecordJson(*r).ok());
    } else {
      CHECK_FALSE(r.error().message.empty());
    }
  }
  CHECK(accepted < 20000);
}

TEST_CASE("decode_survives_random_mutations_and_checksum_catches_altered_changes", "[codec][hostile]") {
  const uint32_t seed = Catch::rngSeed() ? Catch::rngSeed() : 20261130u;
  std::mt19937 rng(seed);
  INFO("seed " << seed << " (rerun with --rng-seed " << seed << ")");
  const Envelope original = SampleEnvelope();
  const std::string bytes = Encode(Record(original));
  size_t rejected = 0, caught = 0, harmless = 0;
  for (int i = 0; i < 30000; i++) {
    std::string m = bytes;
    int edits = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < edits; k++) {
      size_t pos = rng() % m.size();
      switch (rng() % 4) {
        case 0: m[pos] = static_cast<char>(m[pos] ^ (1 << (rng() % 8))); break;
        case 1: m[pos] = static_cast<char>(rng()); break;
        case 2: m.insert(pos, 1, static_cast<char>(rng())); break;
        case 3: m.erase(pos, 1); break;
      }
    }
    auto r = DecodeRecord(m);
    if (!r.ok()) {
      rejected++;
      continue;
    }
    auto rendered_json = RenderRecordJson(*r);
    INFO((rendered_json.ok() ? std::string() : rendered_json.error().message));
    REQUIRE(rendered_json.ok());
    REQUIRE(RenderRecordText(*r).ok());
    const auto* e = std::get_if<Envelope>(&*r);
    if (e == nullptr) continue;
    // Type OIDs and relation OIDs are deliberately outside the checksum (they differ between
    // clusters); compare everything else.
    auto canonical = [](std::vector<RelationInfo> rels) {
      for (auto& rel : rels) {
        rel.oid = 0;
        for (auto& col : rel.columns) col.type_oid = 0;
      }
      return rels;
    };
    auto strip_oids = [e](std::vector<Change> changes, const std::vector<RelationInfo>& rels) {
      // Replace relation OIDs by the position of the relation they resolve to.
      auto pos = [&rels](uint32_t oid) -> uint32_t {
        for (size_t k = 0; k < rels.size(); k++)
          if (rels[k].oid == oid) return static_cast<uint32_t>(k + 1);
        return 0;
      };
      for (auto& ch : changes) {
        ch.relation_oid = ch.relation_oid ? pos(ch.relation_oid) : 0;
        for (auto& t : ch.truncate.relation_oids) t = pos(t);
      }
      (void)e;
      return changes;
    };
    bool content_changed = strip_oids(e->changes, e->relations) != strip_oids(original.changes, original.relations) ||
                           canonical(e->relations) != canonical(original.relations);
    if (content_changed) {
      INFO("mutation " << i << " altered the changes but the checksum still verified");
      REQUIRE_FALSE(VerifyRecordChecksum(*r).ok());
      caught++;
    } else {
      harmless++;
    }
  }
  // All three outcomes must occur, or the test is not exercising what it claims.
  CHECK(rejected > 0);
  CHECK(caught > 0);
  CHECK(harmless > 0);
}

TEST_CASE("render_shows_non_utf8_as_hex_and_tampering_as_mismatch", "[codec][render]") {
  Envelope e = SampleEnvelope();
  e.changes[0].new_tuple[1] = Value::Text(std::string("\xff\xfe", 2));
  auto json = RenderRecordJson(Record(e));
  REQUIRE(json.ok());
  CHECK(json->find("\"text_hex\":\"fffe\"") != std::string::npos);
  CHECK(json->find("\"checksum_status\":\"mismatch\"") != std::string::npos);
  auto text = RenderRecordText(Record(e));
  REQUIRE(text.ok());
  CHECK(text->find("checksum status: mismatch") != std::string::npos);
  REQUIRE(SealEnvelope(e).ok());
  auto sealed = RenderRecordJson(Record(e));
  REQUIRE(sealed.ok());
  CHECK(sealed->find("\"checksum_status\":\"match\"") != std::string::npos);
}

TEST_CASE("committed_fixtures_match_the_encoder", "[codec][fixtures]") {
  // tests/fixtures/*.hex feed pg_regress and the demo. Regenerate with TRELLARA_UPDATE_FIXTURES=1.
  const std::pair<const char*, Record> fixtures[] = {
      {"envelope-sample", Record(SampleEnvelope())},
      {"chunk-sample", Record(SampleChunk(0))},
      {"manifest-sample", Record(SampleManifest())},
      {"commit-marker-sample", Record(SampleCommitMarker())},
  };
  bool update = std::getenv("TRELLARA_UPDATE_FIXTURES") != nullptr;
  for (const auto& [name, record] : fixtures) {
    std::string path = std::string(TRELLARA_SOURCE_DIR) + "/tests/fixtures/" + name + ".hex";
    std::string bytes = Encode(record);
    std::string hex = HexEncode(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    if (update) {
      std::ofstream(path) << hex << "\n";
    }
    std::ifstream in(path);
    std::string committed;
    std::getline(in, committed);
    INFO(path << " is stale; run TRELLARA_UPDATE_FIXTURES=1 build/bin/trellara_tests '[fixtures]'");
    CHECK(committed == hex);
    CHECK(DecodeRecord(FromHex(committed)).ok());
  }
}

TEST_CASE("long_and_non_ascii_names_survive_encoding_from_the_relation_cache", "[codec]") {
  // Names longer than the small-string buffer, encoded twice (the second time from the cache of
  // packed relation descriptions), decode to exactly what was encoded.
  RelationInfo r = testing::SampleOrders();
  r.oid = 99001;
  r.schema = "Sch\"ema ü with a long name that is not a small string";
  r.name = "t23456789012345678901234567890123456789012345678901234567890123";
  r.columns[1].name = "ünïcødé 名前 column with a long enough name to live on the heap";
  r.fingerprint = ComputeFingerprint(r);
  Envelope e = SampleEnvelope();
  e.relations = {r};
  e.changes = {e.changes[0]};
  e.changes[0].relation_oid = r.oid;
  REQUIRE(SealEnvelope(e).ok());
  for (int i = 0; i < 2; i++) {
    auto back = DecodeRecord(Encode(Record(e)));
    REQUIRE(back.ok());
    CHECK(std::get<Envelope>(*back) == e);
  }
}

// ---- DDL records ---------------------------------------------------------------------------

namespace {

// ALTER TABLE public.orders ADD COLUMN status ..., RENAME note TO memo: steps and the definition
// after the command, as the event trigger records them.
Ddl SampleAlterOrders() {
  Ddl d;
  d.command_tag = "ALTER TABLE";
  d.object_type = "table";
  d.schema = "public";
  d.object_identity = "public.orders";
  d.sql = "ALTER TABLE orders ADD COLUMN status varchar(20) COLLATE \"C\" NOT NULL DEFAULT 'new'";
  d.relation_oid = 16384;
  d.relation_schema = "public";
  d.relation_name = "orders";
  d.steps = {DdlStep{DdlStepKind::AddColumn, "status", "", "ADD COLUMN status", false},
             DdlStep{DdlStepKind::AlterColumnType, "amount", "", "ALTER COLUMN amount TYPE numeric(14,2)", true}};
  RelationDefinition def;
  def.oid = 16384;
  def.schema = "public";
  def.name = "orders";
  DdlColumn id{"id", 20, "bigint", -1, true, DefaultKind::Mutable, "nextval('orders_id_seq'::regclass)", "", "", "", ""};
  DdlColumn status{"status", 1043, "character varying(20)", 24, true, DefaultKind::Immutable,
                   "'new'::character varying", "", "", "", "C"};
  DdlColumn upper{"upper_note", 25, "text", -1, false, DefaultKind::None, "", "s", "", "upper(note)", ""};
  DdlColumn seq{"seq", 23, "integer", -1, true, DefaultKind::None, "", "", "d", "", ""};
  def.columns = {id, status, upper, seq};
  def.primary_key = {"id"};
  def.primary_key_name = "orders_pkey";
  def.replica_identity = ReplicaIdentity::Index;
  def.identity_index = "orders_pkey";
  d.definition = def;
  d.publications = {"pub_app", "pub_all"};
  return d;
}

Envelope EnvelopeWithDdl() {
  Envelope e;
  e.tx = TxIdentity{"app", 7301234567890123456ull, 7500, 0x3B00000};
  e.begin_lsn = 0x3AFFF00;
  e.relations = {SampleOrders()};
  Change ddl;
  ddl.op = Op::Ddl;
  ddl.relation_oid = 16384;
  ddl.ddl = SampleAlterOrders();
  Change ins;
  ins.op = Op::Insert;
  ins.relation_oid = 16384;
  ins.new_tuple = {Value::Text("1"), Value::Text("n"), Value::Text("1.00"), Value::Null()};
  e.changes = {ddl, ins};
  REQUIRE(SealEnvelope(e).ok());
  return e;
}

}  // namespace

TEST_CASE("ddl_change_with_steps_and_definition_round_trips_inside_an_envelope", "[codec][ddl]") {
  Envelope e = EnvelopeWithDdl();
  std::string bytes = Encode(Record(e));
  auto back = DecodeRecord(bytes);
  REQUIRE(back.ok());
  REQUIRE(std::holds_alternative<Envelope>(*back));
  const Envelope& got = std::get<Envelope>(*back);
  CHECK(got == e);
  REQUIRE(got.changes[0].ddl.definition.has_value());
  CHECK(got.changes[0].ddl.steps.size() == 2);
  CHECK(got.changes[0].ddl.steps[1].using_expression);
  CHECK(got.changes[0].ddl.definition->columns[1].collation == "C");
  CHECK(got.changes[0].ddl.definition->columns[2].generation_expr == "upper(note)");
  CHECK(VerifyRecordChecksum(*back).ok());
  CHECK(Encode(*back) == bytes);
}

TEST_CASE("ddl_alone_round_trips_through_encode_ddl_and_decode_ddl", "[codec][ddl]") {
  const Ddl ddl = SampleAlterOrders();
  auto bytes = EncodeDdl(ddl);
  REQUIRE(bytes.ok());
  auto back = DecodeDdl(*bytes);
  REQUIRE(back.ok());
  CHECK(*back == ddl);
  // DROP TABLE carries no definition, and stays without one.
  Ddl drop = ddl;
  drop.command_tag = "DROP TABLE";
  drop.steps = {DdlStep{DdlStepKind::DropTable, "", "", "DROP TABLE orders", false}};
  drop.definition.reset();
  auto drop_bytes = EncodeDdl(drop);
  REQUIRE(drop_bytes.ok());
  auto drop_back = DecodeDdl(*drop_bytes);
  REQUIRE(drop_back.ok());
  CHECK(*drop_back == drop);
  CHECK_FALSE(drop_back->definition.has_value());
}

TEST_CASE("ddl_decode_refuses_an_unknown_step_kind_and_an_undescribed_relation", "[codec][ddl][hostile]") {
  SECTION("unknown step kind, alone") {
    Ddl ddl = SampleAlterOrders();
    ddl.steps[1].kind = static_cast<DdlStepKind>(99);
    auto bytes = EncodeDdl(ddl);
    REQUIRE(bytes.ok());
    auto back = DecodeDdl(*bytes);
    REQUIRE_FALSE(back.ok());
    INFO(back.error().message);
    CHECK(back.error().message.find("step 1 has unknown kind 99") != std::string::npos);
  }
  SECTION("unknown step kind, inside an envelope") {
    Envelope e = EnvelopeWithDdl();
    e.changes[0].ddl.steps[0].kind = static_cast<DdlStepKind>(0);
    auto back = DecodeRecord(Encode(Record(e)));
    REQUIRE_FALSE(back.ok());
    INFO(back.error().message);
    CHECK(back.error().message.find("unknown kind 0") != std::string::npos);
  }
  SECTION("ddl change whose relation has no RelationInfo") {
    Envelope e = EnvelopeWithDdl();
    e.changes = {e.changes[0]};
    e.changes[0].relation_oid = 16999;
    e.changes[0].ddl.definition->oid = 16999;
    auto back = DecodeRecord(Encode(Record(e)));
    REQUIRE_FALSE(back.ok());
    INFO(back.error().message);
    CHECK(back.error().message.find("relation oid 16999") != std::string::npos);
    CHECK(back.error().message.find("no RelationInfo") != std::string::npos);
  }
}

TEST_CASE("checksum_changes_when_a_ddl_step_or_definition_is_altered", "[codec][ddl]") {
  const Envelope base = EnvelopeWithDdl();
  const Sha256 sum = base.checksum;
  CHECK(ChecksumOf(base) == sum);
  SECTION("a step's column") {
    Envelope e = base;
    e.changes[0].ddl.steps[0].column = "state";
    CHECK(ChecksumOf(e) != sum);
  }
  SECTION("a step's kind") {
    Envelope e = base;
    e.changes[0].ddl.steps[0].kind = DdlStepKind::DropColumn;
    CHECK(ChecksumOf(e) != sum);
  }
  SECTION("a step's USING flag") {
    Envelope e = base;
    e.changes[0].ddl.steps[1].using_expression = false;
    CHECK(ChecksumOf(e) != sum);
  }
  SECTION("the order of steps") {
    Envelope e = base;
    std::swap(e.changes[0].ddl.steps[0], e.changes[0].ddl.steps[1]);
    CHECK(ChecksumOf(e) != sum);
  }
  SECTION("a default in the definition") {
    Envelope e = base;
    e.changes[0].ddl.definition->columns[1].default_kind = DefaultKind::Mutable;
    CHECK(ChecksumOf(e) != sum);
  }
  SECTION("an altered step fails the verification of the decoded record") {
    Envelope e = base;
    e.changes[0].ddl.steps[0].new_name = "x";  // checksum not resealed
    auto back = DecodeRecord(Encode(Record(e)));
    REQUIRE(back.ok());
    CHECK_FALSE(VerifyRecordChecksum(*back).ok());
  }
}

TEST_CASE("verified_relations_skip_only_a_field_for_field_equal_relation", "[codec]") {
  const Envelope base = SampleEnvelope();
  VerifiedRelations verified;
  // The first record computes each fingerprint; the same RelationInfo again computes nothing.
  REQUIRE(VerifyRecordChecksum(Record(base), verified).ok());
  const size_t first = verified.computed();
  CHECK(first == base.relations.size());
  REQUIRE(VerifyRecordChecksum(Record(base), verified).ok());
  CHECK(verified.computed() == first);
  // A column renamed under the same (now wrong) fingerprint: not equal to what was verified, so it
  // is computed again and refused, exactly as without the cache.
  Envelope renamed = base;
  renamed.relations[0].columns[1].name = "notes";
  CHECK_FALSE(VerifyRecordChecksum(Record(renamed), verified).ok());
  CHECK_FALSE(VerifyRecordChecksum(Record(renamed)).ok());
  CHECK(verified.computed() == first + 1);
  // Other fields the fingerprint covers, each altered alone under the verified fingerprint.
  Envelope retyped = base;
  retyped.relations[0].columns[2].type_name = "numeric(14,2)";
  CHECK_FALSE(VerifyRecordChecksum(Record(retyped), verified).ok());
  Envelope rekeyed = base;
  rekeyed.relations[0].columns[1].is_key = !rekeyed.relations[0].columns[1].is_key;
  CHECK_FALSE(VerifyRecordChecksum(Record(rekeyed), verified).ok());
  Envelope moved = base;
  moved.relations[0].schema = "other";
  CHECK_FALSE(VerifyRecordChecksum(Record(moved), verified).ok());
  // The original still verifies from the cache.
  REQUIRE(VerifyRecordChecksum(Record(base), verified).ok());
}

}  // namespace unit_codec_test
