// views.cpp — the current-state and SCD2 history views' rules (views.h). Pure: no I/O.
#include "trellara/lake/views.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace trellara::lake {

namespace {

std::string DescribeChange(const std::string& table, const ViewChange& c) {
  return "lake table " + table + ": change " + std::to_string(c.position) + " of transaction " + std::to_string(c.xid) +
         " (commit LSN " + std::to_string(c.commit_lsn >> 32) + "/" + std::to_string(c.commit_lsn & 0xffffffffu) +
         " as integers) of store " + c.source;
}

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ",") + s;
  return "(" + out + ")";
}

// One version while the changes are applied: `dropped` when a later change of the same transaction
// replaced or removed it (a state never visible outside its transaction).
struct Building {
  ViewVersion version;
  bool dropped = false;
};

class Builder {
 public:
  Builder(const std::string& table, std::vector<std::string> columns) : table_(table) {
    views_.columns = std::move(columns);
  }

  Status Apply(const ViewChange& c) {
    if (c.op == ViewOp::kTruncate) {
      // Ends every version of the store's table, whatever its columns said.
      std::vector<std::pair<std::string, ViewCells>> ended;
      for (const auto& [id, at] : current_)
        if (id.first == c.source) ended.push_back(id);
      for (const auto& id : ended) End(id, c);
      return Status();
    }
    if (c.columns != views_.columns)
      return MakeError(DescribeChange(table_, c) + " has columns " + Join(c.columns) + " where the table has " +
                       Join(views_.columns) + ": a schema change in the lake's views is not built");
    if (c.key_columns.empty())
      return MakeError(DescribeChange(table_, c) + " names no key column (replica identity / primary key): the "
                       "table has no current-state or history view; give the source table a primary key or a "
                       "replica identity index");
    if (key_index_.empty()) {
      views_.key_columns = c.key_columns;
      for (const auto& k : c.key_columns) {
        const auto at = std::find(views_.columns.begin(), views_.columns.end(), k);
        if (at == views_.columns.end())
          return MakeError(DescribeChange(table_, c) + " names key column " + k + ", which is not a column of it");
        key_index_.push_back(static_cast<size_t>(at - views_.columns.begin()));
      }
    } else if (c.key_columns != views_.key_columns) {
      return MakeError(DescribeChange(table_, c) + " has key " + Join(c.key_columns) + " where earlier changes had " +
                       Join(views_.key_columns) + ": a key change of the table in the lake's views is not built");
    }
    if (c.values.size() != views_.columns.size())
      return MakeError(DescribeChange(table_, c) + " has " + std::to_string(c.values.size()) + " values for " +
                       std::to_string(views_.columns.size()) + " columns");
    ViewCells key;
    for (size_t i : key_index_) key.push_back(c.values[i]);
    switch (c.op) {
      case ViewOp::kInsert:
        Begin({c.source, key}, c.values, c);
        return Status();
      case ViewOp::kUpdate: {
        if (c.old_key && c.old_key->size() != key_index_.size())
          return MakeError(DescribeChange(table_, c) + " has an old key of " + std::to_string(c.old_key->size()) +
                           " values for key " + Join(views_.key_columns));
        const std::pair<std::string, ViewCells> old_id{c.source, c.old_key ? *c.old_key : key};
        const std::pair<std::string, ViewCells> new_id{c.source, key};
        auto prev = current_.find(old_id);
        ViewCells values = c.values;
        for (const auto& name : c.unchanged) {
          const size_t i = static_cast<size_t>(std::find(views_.columns.begin(), views_.columns.end(), name) -
                                               views_.columns.begin());
          if (i >= values.size())
            return MakeError(DescribeChange(table_, c) + " names unchanged column " + name + ", which is not a column of it");
          if (prev != current_.end()) values[i] = versions_[prev->second].version.values[i];
          else views_.unknown_unchanged++;
        }
        if (prev == current_.end()) views_.unmatched++;
        else if (old_id != new_id) End(old_id, c);
        Begin(new_id, values, c);
        return Status();
      }
      case ViewOp::kDelete: {
        const std::pair<std::string, ViewCells> id{c.source, key};
        if (current_.count(id)) End(id, c);
        else views_.unmatched++;
        return Status();
      }
      case ViewOp::kTruncate:
        break;
    }
    return MakeError(DescribeChange(table_, c) + " has an unknown operation");
  }

  TableViews Finish() && {
    for (auto& b : versions_)
      if (!b.dropped) views_.history.push_back(std::move(b.version));
    std::sort(views_.history.begin(), views_.history.end(), [](const ViewVersion& a, const ViewVersion& b) {
      return std::tie(a.source, a.key, a.valid_from_lsn, a.valid_from_xid) <
             std::tie(b.source, b.key, b.valid_from_lsn, b.valid_from_xid);
    });
    return std::move(views_);
  }

 private:
  static bool SameTransaction(const ViewVersion& v, const ViewChange& c) {
    return v.source == c.source && v.valid_from_lsn == c.commit_lsn && v.valid_from_xid == c.xid;
  }

  // Ends the current version of `id` at change c (drops it when c's transaction wrote it).
  void End(const std::pair<std::string, ViewCells>& id, const ViewChange& c) {
    auto at = current_.find(id);
    if (at == current_.end()) return;
    Building& b = versions_[at->second];
    if (SameTransaction(b.version, c)) {
      b.dropped = true;
    } else {
      b.version.valid_to_lsn = c.commit_lsn;
      b.version.valid_to_xid = c.xid;
      b.version.valid_to_time_us = c.commit_time_us;
    }
    current_.erase(at);
  }

  // Begins a version of `id` with `values` at change c (replaces one c's transaction wrote).
  void Begin(const std::pair<std::string, ViewCells>& id, const ViewCells& values, const ViewChange& c) {
    auto at = current_.find(id);
    if (at != current_.end() && SameTransaction(versions_[at->second].version, c)) {
      versions_[at->second].version.values = values;
      return;
    }
    End(id, c);
    ViewVersion v;
    v.source = c.source;
    v.key = id.second;
    v.values = values;
    v.valid_from_lsn = c.commit_lsn;
    v.valid_from_xid = c.xid;
    v.valid_from_time_us = c.commit_time_us;
    versions_.push_back({std::move(v), false});
    current_[id] = versions_.size() - 1;
  }

  const std::string& table_;
  TableViews views_;
  std::vector<size_t> key_index_;
  std::vector<Building> versions_;
  std::map<std::pair<std::string, ViewCells>, size_t> current_;  // (source, key) -> its current version
};

}  // namespace

Result<ViewOp> ParseViewOp(std::string_view text) {
  if (text == "insert") return ViewOp::kInsert;
  if (text == "update") return ViewOp::kUpdate;
  if (text == "delete") return ViewOp::kDelete;
  if (text == "truncate") return ViewOp::kTruncate;
  return MakeError("operation \"" + std::string(text) + "\" is not one of insert, update, delete, truncate");
}

std::vector<ViewVersion> TableViews::Current() const {
  std::vector<ViewVersion> out;
  for (const auto& v : history)
    if (v.is_current()) out.push_back(v);
  return out;  // history is ordered by (source, key, valid_from): so is this, one per (source, key)
}

Result<TableViews> BuildTableViews(const std::string& table, const std::vector<std::string>& columns,
                                   std::vector<ViewChange> changes) {
  std::stable_sort(changes.begin(), changes.end(), [](const ViewChange& a, const ViewChange& b) {
    return std::tie(a.source, a.commit_lsn, a.xid, a.position) < std::tie(b.source, b.commit_lsn, b.xid, b.position);
  });
  Builder builder(table, columns);
  for (const ViewChange& c : changes)
    if (Status s = builder.Apply(c); !s.ok()) return s.error();
  return std::move(builder).Finish();
}

}  // namespace trellara::lake
