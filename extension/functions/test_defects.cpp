// functions/test_defects.cpp — trellara._test_defect(point): whether a negative control named
// `defect.<point>` is switched on in this backend, for the few decisions made in SQL (check()'s
// failover posture, sql/trellara--0.1.0.sql). The same registry and the same switch as every other
// defect (core fault.h): TRELLARA_FAULTS in the server's environment and the superuser-only
// postmaster setting trellara.enable_test_defects; without both it is false. Never true in
// production.
//
// Known defect points decided here (each paired with a matrix row, tests/chaos/import_seed.py):
//   defect.failover_posture_unchecked  check() reports every standby's flow slot synced without
//                                      reading what the standby reported.
extern "C" {
#include "postgres.h"

#include "fmgr.h"
#include "utils/builtins.h"
}

#include <string>

#include "pg/guard.h"
#include "trellara/base/fault.h"

extern "C" {
PGDLLEXPORT Datum trellara_test_defect(PG_FUNCTION_ARGS);
PG_FUNCTION_INFO_V1(trellara_test_defect);
}

Datum trellara_test_defect(PG_FUNCTION_ARGS) {
  char* point = text_to_cstring(PG_GETARG_TEXT_PP(0));
  bool on = false;
  trellara::pg::GuardEntry("trellara._test_defect()", [&] {
    const std::string name = std::string("defect.") + point;
    on = trellara::fault::Hit(name) == trellara::fault::Action::Defect;
  });
  PG_RETURN_BOOL(on);
}
