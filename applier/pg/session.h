// session.h — a pinned libpq session as every command opens one, and the checks they share.
#pragma once

#include <memory>
#include <string>

#include "kit/config.h"
#include "kit/errors.h"
#include "pg/pg_connection.h"

namespace trellara::cli {

// The session settings every target/source session of the applier pins: text values round-trip
// exactly only with the settings the output plugin pinned while decoding. One definition.
inline constexpr const char* kPinnedSessionSettingsSql =
    "SET client_min_messages = warning; SET TimeZone = 'UTC'; SET DateStyle = 'ISO, YMD'; "
    "SET IntervalStyle = 'postgres'; SET extra_float_digits = 3; SET bytea_output = 'hex'; "
    "SET search_path = ''";

// Connects as `application_name` and pins the session settings the applier pins (TimeZone,
// DateStyle, IntervalStyle, extra_float_digits, bytea_output, empty search_path), so text forms
// read here compare with what the applier wrote. `role` ("target", "source") names the side in
// errors. Throws CommandFailed on failure.
std::unique_ptr<PgConnection> ConnectPinned(const FlowConfig& config, const std::string& conninfo,
                                            const std::string& role, const std::string& application_name);

// Runs a statement or throws CommandFailed naming what was being done, the server and the error.
PgResult MustSucceed(PgConnection& conn, PgResult result, const std::string& what);

// Throws CommandFailed unless the target holds this build's trellara state functions.
void RequireTargetState(PgConnection& target, const FlowConfig& config);

}  // namespace trellara::cli
