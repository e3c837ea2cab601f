// functions/envelope_json.cpp — SQL trellara.envelope_json(bytea) returns jsonb.
//
// Renders one Trellara log record (Envelope, Chunk, Manifest or CommitMarker, as protobuf bytes)
// with the same core decoder and renderer as `trellara inspect-transaction --format json`, so
// pg_regress can check plugin output and people can read records from SQL. Input is untrusted:
// bad bytes raise ERROR 22P03 (invalid_binary_representation) naming what is wrong, never crash
// the backend. A record whose checksum does not match is still rendered, with
// "checksum_status": "mismatch": this function inspects, it does not judge. Must never modify
// anything and never let a C++ exception or a Postgres longjmp cross a C++ frame unguarded.
extern "C" {
#include "postgres.h"

#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
}

#include <cstdint>
#include <span>
#include <string>

#include "pg/guard.h"
#include "trellara/record/codec.h"
#include "trellara/record/render.h"

// Declared PGDLLEXPORT before PG_FUNCTION_INFO_V1 (PG15's macro exports only the info function).
extern "C" {
PGDLLEXPORT Datum trellara_envelope_json(PG_FUNCTION_ARGS);
PG_FUNCTION_INFO_V1(trellara_envelope_json);
}

namespace trellara::extension {
namespace {

constexpr char kEntryPoint[] = "trellara.envelope_json(bytea)";

Datum RenderRecordAsJsonb(const bytea* record) {
  const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(VARDATA_ANY(record)),
                                       VARSIZE_ANY_EXHDR(record));
  Result<Record> decoded = DecodeRecord(bytes);
  if (!decoded.ok()) {
    throw pg::SqlError(ERRCODE_INVALID_BINARY_REPRESENTATION,
                       "trellara.envelope_json: " + decoded.error().message,
                       {},
                       "Pass exactly one record payload as Trellara wrote it (an Envelope, Chunk, "
                       "Manifest or CommitMarker, without the log frame header); check that the "
                       "bytes were not truncated or altered, e.g. compare with `trellara "
                       "inspect-transaction --file`.");
  }
  Result<std::string> json = RenderRecordJson(*decoded, /*pretty=*/false);
  if (!json.ok()) {
    throw pg::SqlError(ERRCODE_INTERNAL_ERROR,
                       "trellara.envelope_json: decoded a record of " + std::to_string(bytes.size()) +
                           " bytes but could not render it as JSON: " + json.error().message,
                       {}, "This is a bug in Trellara: report it together with the input bytes.");
  }
  const char* text = json->c_str();
  return pg::CallPostgres([text] { return DirectFunctionCall1(jsonb_in, CStringGetDatum(text)); });
}

}  // namespace
}  // namespace trellara::extension

Datum trellara_envelope_json(PG_FUNCTION_ARGS) {
  // Detoasting can raise ERROR; it happens here, in a frame with plain locals only.
  bytea* record = PG_GETARG_BYTEA_PP(0);
  return trellara::pg::GuardEntry(trellara::extension::kEntryPoint,
                                  [record] { return trellara::extension::RenderRecordAsJsonb(record); });
}
