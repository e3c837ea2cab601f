// pg/guard.cpp — the out-of-line halves of the boundary guards (see guard.h).
//
// Responsible for copying errors between Postgres' ErrorData, the C++ SqlError and the plain
// CapturedError buffer, and for raising the final Postgres ERROR. Must never ereport from inside
// a catch block, never allocate while capturing (capture runs inside catch blocks), and never
// run Postgres error callbacks twice for an error that Postgres already reported once.
extern "C" {
#include "postgres.h"

#include "utils/elog.h"
}

#include <cstring>

#include "pg/guard.h"

namespace trellara::pg {
namespace {

constexpr char kTruncatedMark[] = " [truncated]";

// Copies `source` into `target[capacity]` without allocating; marks a cut visibly.
void CopyText(char* target, size_t capacity, const char* source) noexcept {
  if (source == nullptr) {
    target[0] = '\0';
    return;
  }
  const size_t length = strlen(source);
  if (length < capacity) {
    memcpy(target, source, length + 1);
    return;
  }
  const size_t mark = sizeof(kTruncatedMark);  // includes the terminating NUL
  const size_t keep = capacity - mark;
  memcpy(target, source, keep);
  memcpy(target + keep, kTruncatedMark, mark);
}

template <size_t N>
void CopyText(char (&target)[N], const std::string& source) noexcept {
  CopyText(target, N, source.c_str());
}

// Non-empty buffer as a C string for ErrorData, or null.
char* OrNull(const char* text) { return text[0] != '\0' ? const_cast<char*>(text) : nullptr; }

std::string CopyOrEmpty(const char* text) { return text != nullptr ? std::string(text) : std::string(); }

}  // namespace

SqlError::SqlError(int sqlerrcode, std::string message, std::string detail, std::string hint)
    : sqlerrcode_(sqlerrcode), message_(std::move(message)), detail_(std::move(detail)), hint_(std::move(hint)) {}

SqlError SqlError::FromPostgres(const ErrorData& edata) {
  SqlError error;
  error.sqlerrcode_ = edata.sqlerrcode;
  error.from_postgres_ = true;
  error.origin_ = edata;
  // The strings are owned by std::string members; the copy of the struct keeps only scalars and
  // pointers to constants (filename, funcname, domain, message_id).
  error.origin_.message = error.origin_.detail = error.origin_.detail_log = nullptr;
  error.origin_.hint = error.origin_.context = error.origin_.backtrace = nullptr;
  error.origin_.schema_name = error.origin_.table_name = error.origin_.column_name = nullptr;
  error.origin_.datatype_name = error.origin_.constraint_name = nullptr;
  error.origin_.internalquery = nullptr;
  error.origin_.internalpos = 0;
  error.origin_.assoc_context = nullptr;
  error.message_ = CopyOrEmpty(edata.message);
  error.detail_ = CopyOrEmpty(edata.detail);
  error.detail_log_ = CopyOrEmpty(edata.detail_log);
  error.hint_ = CopyOrEmpty(edata.hint);
  error.context_ = CopyOrEmpty(edata.context);
  error.schema_name_ = CopyOrEmpty(edata.schema_name);
  error.table_name_ = CopyOrEmpty(edata.table_name);
  error.column_name_ = CopyOrEmpty(edata.column_name);
  error.datatype_name_ = CopyOrEmpty(edata.datatype_name);
  error.constraint_name_ = CopyOrEmpty(edata.constraint_name);
  return error;
}

void CapturedError::CaptureSqlError(const SqlError& error) noexcept {
  from_postgres = error.from_postgres_;
  sqlerrcode = error.sqlerrcode_;
  origin = error.origin_;
  CopyText(message, error.message_);
  CopyText(detail, error.detail_);
  CopyText(detail_log, error.detail_log_);
  CopyText(hint, error.hint_);
  CopyText(context, error.context_);
  CopyText(schema_name, error.schema_name_);
  CopyText(table_name, error.table_name_);
  CopyText(column_name, error.column_name_);
  CopyText(datatype_name, error.datatype_name_);
  CopyText(constraint_name, error.constraint_name_);
}

void CapturedError::CaptureInternal(int code, const char* entry_point, const char* what) noexcept {
  memset(this, 0, sizeof(*this));
  from_postgres = false;
  sqlerrcode = code;
  // pg_snprintf: formats into the fixed buffer, never allocates.
  snprintf(message, sizeof(message), "%s failed: %s", entry_point, what != nullptr ? what : "(no message)");
  if (code == ERRCODE_OUT_OF_MEMORY) {
    CopyText(hint, sizeof(hint),
             "A C++ allocation inside Trellara failed; reduce the size of the input or raise the "
             "memory available to this backend, then retry.");
  } else {
    CopyText(hint, sizeof(hint),
             "This is a bug in Trellara: report it with this message and the server log around it.");
  }
}

void RaiseCapturedError(const CapturedError& error, sigjmp_buf* entry_exception_stack,
                        ErrorContextCallback* entry_context_stack) {
  // Unwinding through CallPostgres restores both; restore anyway so that a missed restore in a
  // guard can never send Postgres' next ERROR to a dead frame.
  PG_exception_stack = entry_exception_stack;
  error_context_stack = entry_context_stack;

  if (error.from_postgres) {
    // Postgres already ran its error-context callbacks for this error (error.context has their
    // output); ReThrowError re-raises it as it was instead of collecting the context again.
    ErrorData edata = error.origin;
    edata.elevel = ERROR;
    edata.sqlerrcode = error.sqlerrcode;
    edata.message = OrNull(error.message);
    edata.detail = OrNull(error.detail);
    edata.detail_log = OrNull(error.detail_log);
    edata.hint = OrNull(error.hint);
    edata.context = OrNull(error.context);
    edata.schema_name = OrNull(error.schema_name);
    edata.table_name = OrNull(error.table_name);
    edata.column_name = OrNull(error.column_name);
    edata.datatype_name = OrNull(error.datatype_name);
    edata.constraint_name = OrNull(error.constraint_name);
    ReThrowError(&edata);
  }

  ereport(ERROR, (errcode(error.sqlerrcode), errmsg_internal("%s", error.message),
                  error.detail[0] != '\0' ? errdetail_internal("%s", error.detail) : 0,
                  error.hint[0] != '\0' ? errhint("%s", error.hint) : 0));
  pg_unreachable();
}

void ThrowCaughtPostgresError() {
  // CopyErrorData allocates in CurrentMemoryContext, which CallPostgres has just restored to
  // the caller's context (it must not be ErrorContext).
  ErrorData* edata = CopyErrorData();
  FlushErrorState();
  SqlError error = SqlError::FromPostgres(*edata);
  FreeErrorData(edata);
  throw error;
}

}  // namespace trellara::pg
