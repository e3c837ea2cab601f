// atomic_file.h — the one way core replaces a whole file in a log directory (consumer offsets,
// lost marks, the writer-failure record, a rebuilt or new index): write a temporary file,
// fdatasync it, rename it over the final name, fsync the directory. A crash at any point leaves
// either the old or the new file whole, never a mix; a failure returns before the rename, so the
// old file still holds.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "trellara/log/device.h"
#include "trellara/base/result.h"

namespace trellara::log {

// Replaces <dir>/<name> with `text` durably, through <dir>/<tmp_name>.
Status WriteFileAtomically(LogDevice& device, const std::string& dir, const std::string& name,
                           const std::string& tmp_name, const std::string& text);
Status WriteFileAtomically(LogDevice& device, const std::string& dir, const std::string& name,
                           const std::string& tmp_name, std::span<const uint8_t> bytes);

}  // namespace trellara::log
