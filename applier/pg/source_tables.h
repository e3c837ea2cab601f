// source_tables.h — what snapshot, verify and reseed need to know of a flow's published tables on
// the source (one reader for the three): the columns the stream carries (published, not generated,
// source order), the publication's row filter, the key columns (primary key, else replica identity
// index) and whether the leading key column can be split into ranges.
//
// Read-only; it decides nothing about data. Identifiers come back quoted for SQL.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "kit/config.h"
#include "pg/pg_connection.h"

namespace trellara::cli {

struct SourceTable {
  std::string name;                     // schema.table as the operator reads it
  std::string schema, table;            // unquoted, as the catalog names them
  std::string qualified;                // quoted for SQL
  std::string columns;                  // quoted, comma-separated, source order; never generated columns
  std::vector<std::string> column_list; // the same, one per column
  std::optional<std::string> row_filter;  // the publication's row filter (source side only)
  bool partitioned = false;               // relkind 'p' on the source: its rows are its partitions
  std::vector<std::string> key_columns;   // quoted; empty when the table has no usable key
  std::optional<std::string> split_key;   // quoted leading key column when int2/int4/int8
  std::string split_key_plain;            // the same unquoted, for messages
};

// The flow's publication tables (schema trellara excluded), optionally only `selected`
// (schema.table; a partitioned table the publication lists by its partitions stands for its
// published leaf partitions; a name that is not published is an error naming the publication and
// what it holds). Throws CommandFailed.
std::vector<SourceTable> ReadSourceTables(PgConnection& source, const FlowConfig& config,
                                          const std::vector<std::string>& selected);

}  // namespace trellara::cli
