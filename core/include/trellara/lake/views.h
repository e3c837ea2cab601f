// views.h — what the lake's current-state and SCD2 history views hold (docs/lake.md "Views"), as
// pure rules: given one lake table's changes (the change log of the epochs below the views'
// horizon), the versions of every row of every store. The adapter (`trellara lake fanin run`)
// reads the changes from the catalog and writes the result as Iceberg tables; `lake fanin verify`
// recomputes it here and compares. Nothing here reads a catalog or writes a file, and nothing
// here decides the horizon (epoch.h CompleteHorizon does).
//
// The rules:
//   - A row is identified by (source, key): the store and the values of the relation's key
//     columns (replica identity / primary key) in their text form. Stores never share rows.
//   - Changes apply in (source, commit LSN, xid, position) order; the function sorts them itself.
//   - A version is a committed state of a row: it begins at the transaction that wrote it and ends
//     at the transaction that next changed or deleted it. Several changes of one key inside one
//     transaction make one version (states inside a transaction were never visible).
//   - insert and update begin a version of the key; an update whose old key differs from its new
//     key ends the old key's version; delete ends the key's version; truncate ends every version
//     of its source.
//   - An update's unchanged TOASTed columns (`unchanged`) keep the previous version's values (of
//     the old key when the key changed); without a previous version they stay null and are counted
//     (`unknown_unchanged`), never guessed.
//   - An update or delete of a key with no version (a row that existed before the lake's first
//     change) is counted (`unmatched`): an update begins a version from its own values, a delete
//     ends nothing.
//   - A table whose changes name no key column has no views: an error naming the table.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trellara/base/result.h"

namespace trellara::lake {

using ViewCells = std::vector<std::optional<std::string>>;

enum class ViewOp { kInsert, kUpdate, kDelete, kTruncate };
// "insert" | "update" | "delete" | "truncate"; an error names the text.
Result<ViewOp> ParseViewOp(std::string_view text);

// One change of the lake's change log of a table (trellara_lake.changes), as the views read it.
struct ViewChange {
  std::string source;
  uint64_t commit_lsn = 0;
  uint32_t xid = 0;
  uint32_t position = 0;
  uint64_t commit_time_us = 0;
  ViewOp op = ViewOp::kInsert;
  std::vector<std::string> columns;      // the relation's columns (empty for a truncate of an unknown relation)
  ViewCells values;                      // per column; a delete carries its key columns (or every column)
  std::vector<std::string> key_columns;  // the relation's key columns, by name
  std::optional<ViewCells> old_key;      // an update's old key (values of key_columns), when its source sent one
  std::vector<std::string> unchanged;    // an update's unchanged TOASTed columns (null in `values`)
};

// One version of one row.
struct ViewVersion {
  std::string source;
  ViewCells key;                     // values of the key columns, in the table's key order
  ViewCells values;                  // per table column
  uint64_t valid_from_lsn = 0;       // the commit that wrote it
  uint32_t valid_from_xid = 0;
  uint64_t valid_from_time_us = 0;
  std::optional<uint64_t> valid_to_lsn;  // the commit that replaced or deleted it; none: current
  std::optional<uint32_t> valid_to_xid;
  std::optional<uint64_t> valid_to_time_us;
  bool is_current() const { return !valid_to_lsn.has_value(); }
  bool operator==(const ViewVersion&) const = default;
};

struct TableViews {
  std::vector<std::string> columns;      // the table's columns (the first change's), in order
  std::vector<std::string> key_columns;  // its key columns
  std::vector<ViewVersion> history;      // every version, ordered by (source, key, valid_from)
  uint64_t unmatched = 0;                // updates/deletes of a key with no version
  uint64_t unknown_unchanged = 0;        // unchanged TOASTed cells with no previous value
  // The current-state view: the versions not ended, ordered by (source, key).
  std::vector<ViewVersion> Current() const;
};

// The views of table `table` (for error messages) from its changes. `columns` are the lake table's
// columns (a change whose columns differ is an error: schema changes are not built). An error
// names the table and the change.
Result<TableViews> BuildTableViews(const std::string& table, const std::vector<std::string>& columns,
                                   std::vector<ViewChange> changes);

}  // namespace trellara::lake
