// functions/log_inspect.cpp — SQL trellara._log_inspect(dir) behind trellara.log_inspect(flow):
// the same report as `trellara log inspect --dir`, built by the same core code, as jsonb.
//
// Read-only: never truncates, repairs or rewrites a log. A log with mid-log corruption is still
// reported (with "corruption" set), so the operator sees where it is.
extern "C" {
#include "postgres.h"

#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"

PGDLLEXPORT Datum trellara_log_inspect(PG_FUNCTION_ARGS);
PG_FUNCTION_INFO_V1(trellara_log_inspect);
}

#include <string>

#include "pg/guard.h"
#include "trellara/log/inspect.h"
#include "trellara/log/uring_device.h"

namespace {

Datum InspectAsJsonb(const char* dir) {
  auto device = trellara::log::OpenUringDevice(8);
  if (!device.ok())
    throw trellara::pg::SqlError(ERRCODE_IO_ERROR, std::string("cannot inspect log ") + dir + ": " +
                                                       device.error().message);
  auto report = trellara::log::InspectLog(**device, dir, trellara::log::InspectOptions{});
  if (!report.ok())
    throw trellara::pg::SqlError(ERRCODE_IO_ERROR, std::string("cannot inspect log ") + dir + ": " +
                                                       report.error().message,
                                 {}, "Check that the directory exists and is readable by the postgres OS user.");
  const char* text = report->json.c_str();
  return trellara::pg::CallPostgres([text] { return DirectFunctionCall1(jsonb_in, CStringGetDatum(text)); });
}

}  // namespace

Datum trellara_log_inspect(PG_FUNCTION_ARGS) {
  char* dir = text_to_cstring(PG_GETARG_TEXT_PP(0));
  return trellara::pg::GuardEntry("trellara.log_inspect()", [dir] { return InspectAsJsonb(dir); });
}
