// functions/consumers.cpp — SQL access to a flow log's consumers and retention:
// trellara._log_retention(dir) (behind trellara.consumers(), status() and check()) and
// trellara._unregister_consumer(dir, name) (behind trellara.unregister_consumer()).
//
// Adapters only: what is retained, by whom, and whether a consumer may be removed is decided in
// core (log/retention.h), the same code `trellara log consumers|unregister-consumer` runs. Never
// deletes a segment (only the relay, the log's writer, does).
extern "C" {
#include "postgres.h"

#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"

PGDLLEXPORT Datum trellara_log_retention(PG_FUNCTION_ARGS);
PGDLLEXPORT Datum trellara_unregister_consumer(PG_FUNCTION_ARGS);
PG_FUNCTION_INFO_V1(trellara_log_retention);
PG_FUNCTION_INFO_V1(trellara_unregister_consumer);
}

#include <string>

#include "pg/guard.h"
#include "trellara/log/consumer_offsets.h"
#include "trellara/log/retention.h"
#include "trellara/log/uring_device.h"

namespace {

// io_uring queue entries for these read-mostly calls (they use no asynchronous I/O).
constexpr unsigned kQueueEntries = 8;

std::unique_ptr<trellara::log::LogDevice> OpenDevice(const char* dir) {
  auto device = trellara::log::OpenUringDevice(kQueueEntries);
  if (!device.ok())
    throw trellara::pg::SqlError(ERRCODE_IO_ERROR, std::string("cannot open log ") + dir + ": " +
                                                       device.error().message);
  return std::move(*device);
}

// NULL when the directory does not exist yet (a flow whose relay never ran); {"error": ...} when it
// cannot be read, so that status() keeps working for a broken flow and check() can say why.
Datum RetentionAsJsonb(const char* dir, bool& is_null) {
  trellara::Result<trellara::log::RetentionStatus> status = trellara::MakeError("");
  auto device = trellara::log::OpenUringDevice(kQueueEntries);
  if (!device.ok()) {
    status = device.error();
  } else {
    auto exists = (*device)->Exists(dir);
    if (exists.ok() && !*exists) {
      is_null = true;
      return Datum(0);
    }
    status = trellara::log::DescribeRetention(**device, dir);
  }
  std::string json;
  if (status.ok()) {
    json = trellara::log::RetentionStatusJson(*status);
  } else {
    std::string escaped;
    for (char c : status.error().message) {
      if (c == '"' || c == '\\') escaped += '\\';
      if (static_cast<unsigned char>(c) >= 0x20) escaped += c;
    }
    json = "{\"error\":\"" + escaped + "\"}";
  }
  const char* text = json.c_str();
  return trellara::pg::CallPostgres([text] { return DirectFunctionCall1(jsonb_in, CStringGetDatum(text)); });
}

bool Unregister(const char* dir, const char* name) {
  trellara::Status valid = trellara::log::ValidateConsumerName(name);
  if (!valid.ok()) throw trellara::pg::SqlError(ERRCODE_INVALID_PARAMETER_VALUE, valid.error().message);
  auto device = OpenDevice(dir);
  auto removed = trellara::log::UnregisterConsumer(*device, dir, name);
  // The message says what to do (stop the running applier, or what failed on which file).
  if (!removed.ok()) throw trellara::pg::SqlError(ERRCODE_OBJECT_IN_USE, removed.error().message);
  return *removed;
}

}  // namespace

Datum trellara_log_retention(PG_FUNCTION_ARGS) {
  char* dir = text_to_cstring(PG_GETARG_TEXT_PP(0));
  bool is_null = false;
  Datum result =
      trellara::pg::GuardEntry("trellara._log_retention()", [dir, &is_null] { return RetentionAsJsonb(dir, is_null); });
  if (is_null) PG_RETURN_NULL();
  return result;
}

Datum trellara_unregister_consumer(PG_FUNCTION_ARGS) {
  char* dir = text_to_cstring(PG_GETARG_TEXT_PP(0));
  char* name = text_to_cstring(PG_GETARG_TEXT_PP(1));
  return BoolGetDatum(
      trellara::pg::GuardEntry("trellara.unregister_consumer()", [dir, name] { return Unregister(dir, name); }));
}
