// value_types.h — how the statements the applier builds name a column's type:
// the one place that decides, for every path, what a value sent as text is cast to and how a row is
// compared with it. Tested against every type the output plugin can capture, with modifiers
// (tests/unit/value_types_test.cpp; end to end on every apply path in
// tests/integration/test_apply_type_modifiers.py every_capturable_type_survives_every_apply_path).
//
// Values travel as the source type's text output (the plugin pins DateStyle, IntervalStyle,
// extra_float_digits = 3, bytea_output, TimeZone and an empty search_path; the apply session pins
// the same). The paths:
//   one row      INSERT / UPDATE SET / key match: no cast at all. An untyped parameter is parsed by
//                the target column's own input function and its modifier applied as to an assigned
//                value: a value that does not fit is an error, never a silent cut.
//   merged INSERT  a multi-row VALUES list of an INSERT: each column's untyped parameters take the
//                target column's type, as above.
//   COPY         chunked INSERT runs and snapshot chunks: text COPY, parsed by the column's input
//                function with its modifier — the same as one row.
//   full-row match  (REPLICA IDENTITY FULL, no key): FullRowMatchPredicate below.
//   batched / merged UPDATE  (UPDATE ... FROM unnest($1::text[], ..) SET c = v1::T): BatchCastType.
#pragma once

#include <string>

#include "trellara/base/result.h"

namespace trellara {

// How a type's default `=` relates to its text: Identity when two values are equal exactly when
// their text output is (integers, text, uuid, timestamps, ...); Other for everything else — types
// with no `=` at all (json, xml, point, pg_snapshot), types whose `=` is looser than identity
// (numeric 1.0 = 1.00, interval '1 day' = '24 hours', float -0 = 0, jsonb, box and circle compare
// areas, line and lseg use a tolerance), and every type this list does not know (domains, enums,
// composites, ranges, user types), which are never assumed. Arrays follow their element type;
// `type_name` is format_type's spelling, with or without a modifier and a pg_catalog prefix.
enum class TypeEquality { Identity, Other };
TypeEquality EqualityOf(const std::string& type_name);

// The type without its modifier, spelt as format_type(t, -1) spells it: "character(3)" -> "bpchar"
// (SQL reads "character" as char(1)), "bit(4)" -> "\"bit\"", "timestamp(0) with time zone" ->
// "timestamp with time zone", "interval hour to minute" -> "interval", "numeric(10,2)[]" ->
// "numeric[]", "public.\"my(type)\"" unchanged (a quoted name is never cut).
std::string WithoutModifier(const std::string& type_name);

// The predicate matching a row on one column of a full old image (REPLICA IDENTITY FULL): the
// column against parameter $`param`, the source's text of a value of `source_type` (format_type
// with its modifier, as the plugin records it). The parameter is cast to the source type — its
// value came from that type, so the cast is lossless and names composite and other types an
// untyped parameter could not resolve to. Identity types compare with IS NOT DISTINCT FROM (an
// index on the target can serve it); every other type compares its text output in this session,
// so json, xml, point and box rows can be matched, and 1.0 is not taken for 1.00:
//   "c" IS NOT DISTINCT FROM $3::integer
//   "c"::text IS NOT DISTINCT FROM ($3::numeric)::text
std::string FullRowMatchPredicate(const std::string& quoted_column, size_t param, const std::string& source_type);

// The type a batched or merged UPDATE casts each value of column `column` to, from the target's
// format_type(atttypid, -1) (trellara.batch_column_types). Every column travels as one text array
// and each element is cast on its own (UPDATE ... FROM unnest($1::text[], ..) SET c =
// v1::<this>): a typed array parameter would be parsed with the element type's array delimiter
// (box's is ';', so a comma-separated literal of boxes fails), an array column would need a
// rectangular array of arrays, and a multi-argument unnest of a composite array expands each
// element into its fields. The type has no modifier: an explicit cast to "character" means char(1)
// and would cut 'USD' to 'U' silently; the assignment to the column applies the modifier as for
// one row (an error for a value that does not fit, never a cut). An error when the target named no
// type (the column is missing: the UPDATEs go one at a time, and the first fails naming it).
Result<std::string> BatchCastType(const std::string& unmodified, const std::string& column);

}  // namespace trellara
