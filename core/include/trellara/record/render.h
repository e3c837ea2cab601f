// render.h — renders a record for people (text) and for tools and tests (JSON).
//
// The JSON shape is the contract of `trellara inspect-transaction --format json` and of SQL
// `trellara.envelope_json(bytea)`. Bytes that are not valid UTF-8 are rendered as hex under a
// distinct key ("text_hex"), never replaced or dropped.
#pragma once

#include <string>

#include "trellara/record/envelope.h"
#include "trellara/base/result.h"

namespace trellara {

// JSON object for one record, including "checksum_status": "match" | "mismatch" | "n/a".
Result<std::string> RenderRecordJson(const Record& record, bool pretty = false);
Result<std::string> RenderRecordText(const Record& record);

}  // namespace trellara
