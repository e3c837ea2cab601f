// target_schema.h — the target-side state schema (sql/trellara_target.sql, embedded at build
// time) as one script every command that writes target state runs first: apply, snapshot, reseed,
// verify. The script is idempotent; it runs in one transaction under a transaction-level advisory
// lock, so two commands starting at once never race on CREATE ... IF NOT EXISTS.
#pragma once

#include <string>

namespace trellara::cli {

// "BEGIN; <lock>; <sql/trellara_target.sql>; COMMIT" for PgConnection::Exec.
std::string TargetSchemaScript();

}  // namespace trellara::cli
