// pg/guard.h — the C++/Postgres boundary: every crossing in either direction goes through here.
//
// GuardEntry wraps each Postgres -> C++ entry point (_PG_init, SQL functions, callbacks, worker
// mains): it catches every C++ exception, copies it into a plain buffer, and raises the Postgres
// ERROR only after the catch block has ended. CallPostgres wraps each call from C++ into an
// ERROR-capable Postgres function: it catches the longjmp with its own sigsetjmp, restores
// PG_exception_stack, error_context_stack and CurrentMemoryContext, copies the error and rethrows
// it as SqlError, so C++ destructors run. This file must never let an exception reach Postgres,
// never ereport inside a catch block, and never leave PG_exception_stack pointing at a dead frame.
#pragma once

extern "C" {
#include "postgres.h"
}

#include <csetjmp>
#include <exception>
#include <new>
#include <string>
#include <type_traits>
#include <utility>

namespace trellara::pg {

// An ERROR to raise in Postgres: either built by Trellara's C++ code (what failed, on which
// object, what to do next) or copied from an ERROR that Postgres raised inside CallPostgres.
class SqlError : public std::exception {
 public:
  SqlError(int sqlerrcode, std::string message, std::string detail = {}, std::string hint = {});

  // Copies `edata` (the ERROR Postgres just raised); the caller still owns and frees it.
  static SqlError FromPostgres(const ErrorData& edata);

  const char* what() const noexcept override { return message_.c_str(); }
  int sqlerrcode() const noexcept { return sqlerrcode_; }
  bool from_postgres() const noexcept { return from_postgres_; }
  const std::string& message() const noexcept { return message_; }
  const std::string& detail() const noexcept { return detail_; }
  const std::string& hint() const noexcept { return hint_; }

 private:
  friend struct CapturedError;
  SqlError() = default;

  int sqlerrcode_ = 0;
  bool from_postgres_ = false;
  // Scalars of the original Postgres error (level, origin file/line/function, cursor position);
  // its string pointers are always null here: the strings live in the members below.
  ErrorData origin_{};
  std::string message_, detail_, detail_log_, hint_, context_;
  std::string schema_name_, table_name_, column_name_, datatype_name_, constraint_name_;
};

// Plain-old-data copy of an error, filled inside a catch block and read after it has ended.
// Fixed-size buffers: copying into them never allocates and so never fails. A string longer than
// its buffer is cut and visibly marked " [truncated]"; nothing is dropped silently.
struct CapturedError {
  static constexpr size_t kMessageBytes = 4096;
  static constexpr size_t kDetailBytes = 4096;
  static constexpr size_t kHintBytes = 1024;
  static constexpr size_t kContextBytes = 4096;

  bool from_postgres;
  int sqlerrcode;
  ErrorData origin;
  char message[kMessageBytes];
  char detail[kDetailBytes];
  char detail_log[kDetailBytes];
  char hint[kHintBytes];
  char context[kContextBytes];
  char schema_name[NAMEDATALEN];
  char table_name[NAMEDATALEN];
  char column_name[NAMEDATALEN];
  char datatype_name[NAMEDATALEN];
  char constraint_name[NAMEDATALEN];

  void CaptureSqlError(const SqlError& error) noexcept;
  // An unexpected C++ failure in `entry_point`: a Trellara bug or an allocation failure.
  void CaptureInternal(int code, const char* entry_point, const char* what) noexcept;
};
static_assert(std::is_trivially_copyable_v<CapturedError> && std::is_standard_layout_v<CapturedError>,
              "CapturedError must stay plain data: it is written inside catch blocks");

// Raises `error` as a Postgres ERROR. Call only after the catch block that filled it has ended.
// Restores PG_exception_stack/error_context_stack to the entry point's values first.
[[noreturn]] void RaiseCapturedError(const CapturedError& error, sigjmp_buf* entry_exception_stack,
                                     ErrorContextCallback* entry_context_stack);

// Called by CallPostgres after a longjmp has landed: copies the pending Postgres error, clears
// Postgres' error state and throws it as SqlError.
[[noreturn]] void ThrowCaughtPostgresError();

// Runs `body` (C++ code) for the Postgres entry point `entry_point` ("trellara.version()") and
// returns its result; any exception becomes a Postgres ERROR raised after the catch block.
// The caller's frame must hold only plain locals (Postgres may longjmp through it).
template <typename Body>
auto GuardEntry(const char* entry_point, Body&& body) -> decltype(body()) {
  CapturedError captured;  // written only inside the catch blocks below, read after them
  sigjmp_buf* const entry_exception_stack = PG_exception_stack;
  ErrorContextCallback* const entry_context_stack = error_context_stack;
  try {
    return std::forward<Body>(body)();
  } catch (const SqlError& error) {
    captured.CaptureSqlError(error);
  } catch (const std::bad_alloc&) {
    captured.CaptureInternal(ERRCODE_OUT_OF_MEMORY, entry_point, "out of memory");
  } catch (const std::exception& error) {
    captured.CaptureInternal(ERRCODE_INTERNAL_ERROR, entry_point, error.what());
  } catch (...) {
    captured.CaptureInternal(ERRCODE_INTERNAL_ERROR, entry_point, "unknown C++ exception");
  }
  // The exception object is gone; only plain data is left in this frame.
  RaiseCapturedError(captured, entry_exception_stack, entry_context_stack);
}

// Calls an ERROR-capable Postgres function from C++ (palloc, syscache, SPI, jsonb_in, ...).
// `call` must be a thin lambda around the Postgres call: no locals with destructors inside it,
// no C++ exceptions out of it. An ERROR comes back as SqlError (from_postgres() true); it must be
// allowed to reach GuardEntry, which re-raises it, or be handled inside a subtransaction that the
// caller rolls back: catching it and carrying on would leave locks and buffer pins behind.
template <typename Call>
auto CallPostgres(Call&& call) -> decltype(call()) {
  using Return = decltype(call());
  sigjmp_buf* volatile saved_exception_stack = PG_exception_stack;
  ErrorContextCallback* volatile saved_context_stack = error_context_stack;
  volatile MemoryContext saved_memory_context = CurrentMemoryContext;
  sigjmp_buf landing;
  if (sigsetjmp(landing, 0) == 0) {
    PG_exception_stack = &landing;
    if constexpr (std::is_void_v<Return>) {
      call();
      PG_exception_stack = saved_exception_stack;
      return;
    } else {
      Return result = call();
      PG_exception_stack = saved_exception_stack;
      return result;
    }
  }
  // Arrived here by siglongjmp from ereport(ERROR): put Postgres' error state back together.
  PG_exception_stack = saved_exception_stack;
  error_context_stack = saved_context_stack;
  MemoryContextSwitchTo(saved_memory_context);
  ThrowCaughtPostgresError();
}

}  // namespace trellara::pg
