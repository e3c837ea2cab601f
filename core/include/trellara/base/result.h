// result.h — how core reports failure: as a value, never as an exception.
//
// Every fallible core function returns Result<T> (or Status). The message of an Error is written
// for a person: what failed, on which object, and what to do next. Core never throws across its
// public API; callers in extension/ and applier/ turn an Error into ereport or an exit code.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace trellara {

struct Error {
  std::string message;
};

inline Error MakeError(std::string message) { return Error{std::move(message)}; }

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT(implicit)
  Result(Error error) : v_(std::in_place_index<1>, std::move(error)) {}  // NOLINT(implicit)

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & {
    assert(ok());
    return std::get<0>(v_);
  }
  const T& value() const& {
    assert(ok());
    return std::get<0>(v_);
  }
  T&& value() && {
    assert(ok());
    return std::get<0>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  const Error& error() const {
    assert(!ok());
    return std::get<1>(v_);
  }

 private:
  std::variant<T, Error> v_;
};

// Status is Result<void>: success or an Error.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT(implicit)
  static Status Ok() { return Status(); }

  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const {
    assert(!ok_);
    return error_;
  }

 private:
  Error error_{};
  bool ok_ = true;
};

}  // namespace trellara

// Propagate an error from a Status or Result expression in a function returning Status/Result.
#define TRELLARA_TRY(expr)                          \
  do {                                              \
    auto trellara_try_result_ = (expr);             \
    if (!trellara_try_result_.ok()) return trellara_try_result_.error(); \
  } while (0)
