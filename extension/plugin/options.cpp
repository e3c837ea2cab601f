// plugin/options.cpp — the output plugin's options (-o name=value of a decoding session) and its
// settings (trellara.chunk_changes, trellara.chunk_bytes, trellara.record_bytes_max).
#include "plugin/state.h"

namespace trellara::plugin {

int chunk_changes_guc = static_cast<int>(kDefaultChunkChanges);
int chunk_kb_guc = static_cast<int>(kDefaultChunkBytes >> 10);
int record_kb_max_guc = static_cast<int>(kMaxRecordBytes >> 10);

namespace {
// --- options -----------------------------------------------------------------------------------
[[noreturn]] void OptionError(const std::string& message, const std::string& hint) {
  throw pg::SqlError(ERRCODE_INVALID_PARAMETER_VALUE, message, {}, hint);
}

constexpr char kOptionsHint[] =
    "The trellara output plugin accepts: publication (required, comma-separated names), "
    "chunk_changes (1..1048576), chunk_bytes (65536..1073741824), flow (name), messages (true|false), "
    "skip_through_lsn (pg_lsn), streaming (true|false), partitions (1..64, partitioned mode), map_version (1..).";

}  // namespace

Options ParseOptions(List* option_list) {
  Options opt;
  opt.chunk_changes = static_cast<uint32_t>(chunk_changes_guc);
  opt.chunk_bytes = static_cast<uint64_t>(chunk_kb_guc) << 10;
  bool have_publication = false;
  ListCell* lc;
  foreach (lc, option_list) {
    DefElem* elem = static_cast<DefElem*>(lfirst(lc));
    std::string name = elem->defname;
    if (elem->arg == nullptr || !IsA(elem->arg, String))
      OptionError("trellara output plugin option \"" + name + "\" needs a value", kOptionsHint);
    std::string value = strVal(elem->arg);
    if (name == "publication") {
      List* names = nullptr;
      char* raw = pstrdup(value.c_str());
      bool ok = pg::CallPostgres([&] { return SplitIdentifierString(raw, ',', &names); });
      if (!ok || names == nullptr)
        OptionError("trellara output plugin option \"publication\" has an invalid value \"" + value + "\"",
                    "Give one or more publication names separated by commas.");
      ListCell* nc;
      foreach (nc, names) opt.publication_names.emplace_back(static_cast<char*>(lfirst(nc)));
      have_publication = true;
    } else if (name == "chunk_changes") {
      char* end = nullptr;
      errno = 0;
      long v = std::strtol(value.c_str(), &end, 10);
      if (errno != 0 || end == value.c_str() || *end != '\0' || v < 1 || v > static_cast<long>(kMaxChunkChanges))
        OptionError("trellara output plugin option \"chunk_changes\" has an invalid value \"" + value + "\"",
                    "chunk_changes is the number of changes per chunk, 1..1048576.");
      opt.chunk_changes = static_cast<uint32_t>(v);
    } else if (name == "chunk_bytes") {
      char* end = nullptr;
      errno = 0;
      long long v = std::strtoll(value.c_str(), &end, 10);
      if (errno != 0 || end == value.c_str() || *end != '\0' || v < static_cast<long long>(kMinChunkBytes) ||
          v > static_cast<long long>(kMaxChunkBytes))
        OptionError("trellara output plugin option \"chunk_bytes\" has an invalid value \"" + value + "\"",
                    "chunk_bytes is the byte bound of a chunk's values, 65536..1073741824.");
      opt.chunk_bytes = static_cast<uint64_t>(v);
    } else if (name == "flow") {
      opt.flow = value;
    } else if (name == "messages") {
      bool b = false;
      if (!parse_bool(value.c_str(), &b))
        OptionError("trellara output plugin option \"messages\" has an invalid value \"" + value + "\"",
                    "messages is a boolean: true or false.");
      opt.messages = b;
    } else if (name == "streaming") {
      bool b = false;
      if (!parse_bool(value.c_str(), &b))
        OptionError("trellara output plugin option \"streaming\" has an invalid value \"" + value + "\"",
                    "streaming is a boolean: true or false.");
      opt.streaming = b;
    } else if (name == "skip_through_lsn") {
      bool bad = false;
      XLogRecPtr lsn = pg_lsn_in_internal(value.c_str(), &bad);
      if (bad)
        OptionError("trellara output plugin option \"skip_through_lsn\" has an invalid value \"" + value + "\"",
                    "skip_through_lsn is an LSN such as 0/16B3748.");
      opt.skip_through_lsn = lsn;
    } else if (name == "partitions" || name == "map_version") {
      char* end = nullptr;
      errno = 0;
      long v = std::strtol(value.c_str(), &end, 10);
      const long max = name == "partitions" ? static_cast<long>(partition::kMaxPartitions) : INT32_MAX;
      if (errno != 0 || end == value.c_str() || *end != '\0' || v < 1 || v > max)
        OptionError("trellara output plugin option \"" + name + "\" has an invalid value \"" + value + "\"",
                    name == "partitions" ? "partitions is the partition count of partitioned mode, 1..64."
                                         : "map_version is the partition map's version, 1 or more.");
      (name == "partitions" ? opt.partitions : opt.map_version) = static_cast<uint32_t>(v);
    } else {
      OptionError("unrecognized trellara output plugin option \"" + name + "\"", kOptionsHint);
    }
  }
  if (!have_publication)
    OptionError("trellara output plugin option \"publication\" is required",
                "Name the publication whose tables to capture, e.g. -o publication=app_pub or "
                "pg_logical_slot_get_binary_changes(slot, NULL, NULL, 'publication', 'app_pub').");
  return opt;
}

void DefineGucs() {
  DefineCustomIntVariable("trellara.chunk_changes",
                          "Changes per chunk: a transaction with more changes is written as chunks, a manifest "
                          "and a commit marker.",
                          "The output plugin option chunk_changes overrides it per decoding session.",
                          &chunk_changes_guc, static_cast<int>(kDefaultChunkChanges), 1,
                          static_cast<int>(kMaxChunkChanges), PGC_USERSET, 0, nullptr, nullptr, nullptr);
  DefineCustomIntVariable("trellara.chunk_bytes",
                          "Bytes of values per chunk: a chunk closes before a change that would take it past "
                          "this bound (a larger single change travels alone in its own record).",
                          "Bounds the memory the plugin and the relay hold per chunk. The output plugin option "
                          "chunk_bytes overrides it per decoding session.",
                          &chunk_kb_guc, static_cast<int>(kDefaultChunkBytes >> 10),
                          static_cast<int>(kMinChunkBytes >> 10), static_cast<int>(kMaxChunkBytes >> 10),
                          PGC_USERSET, GUC_UNIT_KB, nullptr, nullptr, nullptr);
  DefineCustomIntVariable("trellara.record_bytes_max",
                          "Largest record the plugin emits; a transaction with a larger record cannot be captured.",
                          "The default and maximum, 1 GB, is the most one decoding write can carry. A relay "
                          "flow whose transaction exceeds it stops in an error state naming the transaction.",
                          &record_kb_max_guc, static_cast<int>(kMaxRecordBytes >> 10), 1024,
                          static_cast<int>(kMaxRecordBytes >> 10), PGC_SIGHUP, GUC_UNIT_KB, nullptr, nullptr,
                          nullptr);
}

}  // namespace trellara::plugin
