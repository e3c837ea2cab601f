// pg/memory_context.h — scoped use of Postgres memory contexts from C++.
//
// MemoryContextSwitch makes a context current for one C++ scope and switches back on every exit,
// including exceptions. OwnedMemoryContext creates a child context (through CallPostgres: the
// creation can raise out-of-memory) and deletes it, with everything palloc'd in it, at scope
// exit; a per-message context calls Reset() after each message. Neither must be held across a
// Postgres ERROR without a guard (a longjmp skips destructors; the parent context still frees
// the child, the switch is restored by Postgres' own error recovery).
#pragma once

extern "C" {
#include "postgres.h"

#include "utils/memutils.h"
}

#include <utility>

#include "pg/guard.h"

namespace trellara::pg {

class MemoryContextSwitch {
 public:
  explicit MemoryContextSwitch(MemoryContext target) : previous_(MemoryContextSwitchTo(target)) {}
  ~MemoryContextSwitch() { MemoryContextSwitchTo(previous_); }
  MemoryContextSwitch(const MemoryContextSwitch&) = delete;
  MemoryContextSwitch& operator=(const MemoryContextSwitch&) = delete;

 private:
  MemoryContext previous_;
};

class OwnedMemoryContext {
 public:
  // `name` must have static storage (a string literal): Postgres keeps the pointer.
  static OwnedMemoryContext Create(MemoryContext parent, const char* name) {
    MemoryContext context = CallPostgres([&] {
      return AllocSetContextCreateInternal(parent, name, ALLOCSET_DEFAULT_SIZES);
    });
    return OwnedMemoryContext(context);
  }

  OwnedMemoryContext(OwnedMemoryContext&& other) noexcept : context_(std::exchange(other.context_, nullptr)) {}
  OwnedMemoryContext& operator=(OwnedMemoryContext&&) = delete;
  OwnedMemoryContext(const OwnedMemoryContext&) = delete;
  OwnedMemoryContext& operator=(const OwnedMemoryContext&) = delete;
  ~OwnedMemoryContext() {
    if (context_ != nullptr) MemoryContextDelete(context_);
  }

  MemoryContext get() const noexcept { return context_; }
  // Frees everything allocated in the context since the last reset; the context stays usable.
  void Reset() noexcept { MemoryContextReset(context_); }

 private:
  explicit OwnedMemoryContext(MemoryContext context) : context_(context) {}
  MemoryContext context_;
};

}  // namespace trellara::pg
