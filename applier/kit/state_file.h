// state_file.h — the small JSON state files long-running commands leave beside a flow's log for
// `trellara status` (consumers/.applier.state, .forwarder.state, .receiver.state), and the UTC
// time stamps they and the reports carry. One way to write them: a temporary file renamed over the
// old one, so a reader sees the old or the new state, never half of one.
//
// Best effort by design: a state file only describes a process; failing to write one warns on
// stderr and never stops the process it describes.
#pragma once

#include <string>

namespace trellara::cli {

// Now, as "YYYY-MM-DDTHH:MM:SSZ".
std::string UtcNowText();

// Replaces `path` with `text` (through `path`.tmp and a rename); a warning on failure.
void ReplaceStateFile(const std::string& path, const std::string& text);

}  // namespace trellara::cli
