// plugin/output_settings.cpp — the settings that shape the text of decoded values (DateStyle,
// IntervalStyle, extra_float_digits, bytea_output, TimeZone, search_path): pinned around each
// decoded transaction, or once for a process that only decodes (the relay worker). It must never
// leave them pinned past the transaction it pinned them for, nor change any other setting.
#include "plugin/state.h"
#include "trellara/base/fault.h"

namespace trellara::plugin {

namespace {

// Pins the settings that shape type output and type names for the duration of one transaction's
// decoding, so the same WAL yields the same bytes (and checksums) whoever decodes it: TimeZone
// for timestamptz/tstzrange text, an empty search_path so user types, regclass values and the
// like are schema-qualified the same way in every session.
bool settings_pinned_by_process = false;

// Negative control (tests/integration/test_apply_server_settings.py): decode with the server's own
// settings, as if nothing were pinned.
bool DecodeUnpinned() { return fault::Hit("defect.plugin_output_settings_unpinned") == fault::Action::Defect; }

}  // namespace

void PinOutputSettings(State* s) {
  if (settings_pinned_by_process) return;  // the relay worker pinned them for its whole life
  if (DecodeUnpinned()) return;
  pg::CallPostgres([&] {
    s->guc_nest_level = NewGUCNestLevel();
    (void)set_config_option("datestyle", "ISO, YMD", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
    (void)set_config_option("intervalstyle", "postgres", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
    (void)set_config_option("extra_float_digits", "3", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
    (void)set_config_option("bytea_output", "hex", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
    (void)set_config_option("timezone", "UTC", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
    (void)set_config_option("search_path", "", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
  });
}

void UnpinOutputSettings(State* s) {
  if (s->guc_nest_level == 0) return;
  int level = s->guc_nest_level;
  s->guc_nest_level = 0;
  pg::CallPostgres([level] { AtEOXact_GUC(false, level); });
}

void PinOutputSettingsForProcess() {
  if (DecodeUnpinned()) return;
  static const char* const kSettings[][2] = {{"datestyle", "ISO, YMD"}, {"intervalstyle", "postgres"},
                                             {"extra_float_digits", "3"}, {"bytea_output", "hex"},
                                             {"timezone", "UTC"},         {"search_path", ""}};
  for (const auto& setting : kSettings) SetConfigOption(setting[0], setting[1], PGC_SUSET, PGC_S_OVERRIDE);
  settings_pinned_by_process = true;
}

}  // namespace trellara::plugin
