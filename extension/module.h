// module.h — facts about how this shared library was loaded, recorded once by _PG_init.
//
// Must never hold state that needs a constructor or destructor: the .so has no static
// initialisers (CONVENTIONS.md), so everything here is plain data set in _PG_init.
#pragma once

namespace trellara::extension {

// True when the library was loaded through shared_preload_libraries (at postmaster start),
// false when CREATE EXTENSION or a function call loaded it into one backend. The SQL functions
// work either way; the relay background worker (a later issue) needs preloading and will refuse
// with a hint naming shared_preload_libraries when this is false.
bool LoadedByPreload();

}  // namespace trellara::extension
