#include "pg/target_schema.h"

#include "trellara_target_sql.h"

namespace trellara::cli {

std::string TargetSchemaScript() {
  return std::string("BEGIN; SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended('trellara target schema', 0));\n") +
         kTargetSchemaSql + "\n;COMMIT;";
}

}  // namespace trellara::cli
