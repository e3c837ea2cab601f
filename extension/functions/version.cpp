// functions/version.cpp — SQL trellara.version(): the version of the loaded shared library.
//
// Reports the library's own version (set at build time from trellara.control), so a mismatch
// with the installed SQL script (pg_extension.extversion) is visible. Must never read files or
// catalogs: it is the cheapest "is the library loaded and which one" probe.
extern "C" {
#include "postgres.h"

#include "fmgr.h"
#include "utils/builtins.h"
}

#include "pg/guard.h"

#ifndef TRELLARA_VERSION
#error "TRELLARA_VERSION must be defined by the build (Makefile reads it from trellara.control)"
#endif

// Declared PGDLLEXPORT before PG_FUNCTION_INFO_V1 (PG15's macro exports only the info function).
extern "C" {
PGDLLEXPORT Datum trellara_version(PG_FUNCTION_ARGS);
PG_FUNCTION_INFO_V1(trellara_version);
}

Datum trellara_version(PG_FUNCTION_ARGS) {
  (void)fcinfo;
  return trellara::pg::GuardEntry("trellara.version()", [] {
    return trellara::pg::CallPostgres([] { return PointerGetDatum(cstring_to_text(TRELLARA_VERSION)); });
  });
}
