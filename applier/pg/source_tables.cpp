// source_tables.cpp — the published tables of a flow as snapshot, verify and reseed read them
// (source_tables.h).
#include "pg/source_tables.h"

#include <algorithm>

#include "kit/errors.h"
#include "pg/session.h"
#include "trellara/apply/snapshot.h"

namespace trellara::cli {
namespace {

// "a,\"b,c\",d" (quote_ident output joined with ',') -> {a, "b,c", d}: a comma inside double
// quotes is part of the name.
std::vector<std::string> SplitQuotedList(const std::string& text) {
  std::vector<std::string> out;
  if (text.empty()) return out;
  bool quoted = false;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); i++) {
    if (i < text.size() && text[i] == '"') quoted = !quoted;
    if (i == text.size() || (text[i] == ',' && !quoted)) {
      out.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

}  // namespace

std::vector<SourceTable> ReadSourceTables(PgConnection& source, const FlowConfig& config,
                                          const std::vector<std::string>& selected) {
  auto flow = MustSucceed(source, source.ExecParams("SELECT publication FROM trellara.flows WHERE name = $1",
                                                    {config.flow_name}),
                          "reading flow " + config.flow_name + " from trellara.flows on the source");
  if (flow.rows() != 1)
    throw CommandFailed("flow " + config.flow_name + " does not exist on the source " + source.Describe() +
                        " (trellara.flows); check flow.name and source.conninfo in " + config.path, 2);
  const std::string publication = flow.Value(0, 0).value_or("");
  // Key: the primary key, else the replica identity index; the leading column splits ranges.
  auto r = MustSucceed(
      source,
      source.ExecParams(
          "SELECT p.schemaname || '.' || p.tablename, format('%I.%I', p.schemaname, p.tablename), "
          // The columns the stream carries: published (attnames), never generated (the plugin, like
          // pgoutput in PG15, does not send them; COPY cannot write them), in the source's order.
          "  (SELECT array_to_string(ARRAY(SELECT quote_ident(a.attname) FROM pg_catalog.pg_attribute a "
          "     WHERE a.attrelid = format('%I.%I', p.schemaname, p.tablename)::regclass AND a.attnum > 0 "
          "       AND NOT a.attisdropped AND a.attgenerated = '' AND a.attname = ANY (p.attnames) "
          "     ORDER BY a.attnum), ',')), p.rowfilter, "
          "  (SELECT array_to_string(ARRAY(SELECT quote_ident(a.attname) FROM unnest(i.indkey) WITH ORDINALITY AS k(attnum, n) "
          "                                JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum ORDER BY k.n), ',') "
          "     || '|' || (SELECT t.typname || '|' || a.attname FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
          "                 WHERE a.attrelid = i.indrelid AND a.attnum = i.indkey[0]) "
          "     FROM pg_index i WHERE i.indrelid = format('%I.%I', p.schemaname, p.tablename)::regclass "
          // The replica identity index first: a DELETE's old image carries its columns only, and
          // the applier maps every change to its chunk by the split column.
          "      AND (i.indisprimary OR i.indisreplident) ORDER BY i.indisreplident DESC, i.indisprimary DESC LIMIT 1) "
          ", p.schemaname, p.tablename, "
          "  (SELECT c.relkind = 'p' FROM pg_catalog.pg_class c WHERE c.oid = format('%I.%I', p.schemaname, p.tablename)::regclass) "
          "FROM pg_catalog.pg_publication_tables p WHERE p.pubname = $1 "
          // Trellara's own relations are never captured (docs/capture.md).
          "AND p.schemaname <> 'trellara' ORDER BY p.schemaname, p.tablename",
          {publication}),
      "listing the tables of publication " + publication + " on the source");
  // A partitioned table the publication lists by its partitions (publish_via_partition_root off,
  // as FOR ALL TABLES does) stands for those of its leaf partitions that are published.
  std::vector<std::string> wanted;
  for (const auto& name : selected) {
    bool listed = false;
    for (int i = 0; i < r.rows() && !listed; i++) listed = r.Value(i, 0) == std::optional<std::string>(name);
    if (listed) {
      wanted.push_back(name);
      continue;
    }
    auto leaves = MustSucceed(
        source,
        source.ExecParams("SELECT ln.nspname || '.' || l.relname FROM pg_catalog.pg_class c "
                          "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
                          "CROSS JOIN LATERAL pg_catalog.pg_partition_tree(c.oid) t "
                          "JOIN pg_catalog.pg_class l ON l.oid = t.relid "
                          "JOIN pg_catalog.pg_namespace ln ON ln.oid = l.relnamespace "
                          "WHERE c.relkind = 'p' AND n.nspname || '.' || c.relname = $1 AND t.isleaf ORDER BY 1",
                          {name}),
        "listing the partitions of " + name + " on the source");
    bool expanded = false;
    for (int j = 0; j < leaves.rows(); j++) {
      const std::string leaf = leaves.Value(j, 0).value_or("");
      for (int i = 0; i < r.rows(); i++)
        if (r.Value(i, 0) == std::optional<std::string>(leaf)) {
          wanted.push_back(leaf);
          expanded = true;
        }
    }
    if (!expanded) wanted.push_back(name);  // refused below, naming what the publication holds
  }
  std::vector<SourceTable> tables;
  for (int i = 0; i < r.rows(); i++) {
    SourceTable t;
    t.name = r.Value(i, 0).value_or("");
    if (!selected.empty() && std::find(wanted.begin(), wanted.end(), t.name) == wanted.end()) continue;
    t.qualified = r.Value(i, 1).value_or("");
    t.schema = r.Value(i, 5).value_or("");
    t.table = r.Value(i, 6).value_or("");
    t.column_list = SplitQuotedList(r.Value(i, 2).value_or(""));
    t.columns.clear();
    for (const auto& c : t.column_list) t.columns += (t.columns.empty() ? "" : ", ") + c;
    t.row_filter = r.Value(i, 3);
    t.partitioned = r.Value(i, 7) == std::optional<std::string>("t");
    if (auto key = r.Value(i, 4)) {
      // "<quoted key cols>|<typname of leading>|<leading attname>"
      const size_t bar1 = key->find('|');
      const size_t bar2 = key->find('|', bar1 + 1);
      const std::string cols = key->substr(0, bar1);
      const std::string type = key->substr(bar1 + 1, bar2 - bar1 - 1);
      t.split_key_plain = key->substr(bar2 + 1);
      t.key_columns = SplitQuotedList(cols);
      if (SplittableKeyType(type)) t.split_key = t.key_columns.front();
    }
    tables.push_back(std::move(t));
  }
  for (const auto& name : wanted)
    if (std::none_of(tables.begin(), tables.end(), [&](const SourceTable& t) { return t.name == name; })) {
      std::string names;
      for (int i = 0; i < r.rows(); i++) names += (names.empty() ? "" : ", ") + r.Value(i, 0).value_or("");
      throw CommandFailed("table " + name + " is not in publication " + publication + " of flow " + config.flow_name +
                              " on the source (it holds: " + names +
                              "); name it as schema.table, or add it to the publication first",
                          2);
    }
  if (tables.empty())
    throw CommandFailed("publication " + publication + " of flow " + config.flow_name +
                            " has no tables on the source; there is nothing to copy or compare",
                        2);
  return tables;
}

}  // namespace trellara::cli
