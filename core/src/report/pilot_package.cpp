// pilot_package.cpp — verdicts and renderings of the proof bundle (see pilot_package.h).
#include "trellara/report/pilot_package.h"

#include <nlohmann/json.hpp>

#include <array>
#include <sstream>

#include "trellara/record/checksum.h"
#include "trellara/record/envelope.h"

namespace trellara::pilot {

const char* ArtefactResultName(ArtefactResult result) {
  switch (result) {
    case ArtefactResult::Pass: return "pass";
    case ArtefactResult::Fail: return "fail";
    case ArtefactResult::Missing: return "missing";
  }
  return "missing";
}

ArtefactResult ClassifyCheck(int exit_code, std::string& detail) {
  if (exit_code == 0) {
    detail = "no critical finding (exit 0; warnings, if any, are listed in the file)";
    return ArtefactResult::Pass;
  }
  if (exit_code == 2) {
    detail = "critical findings (exit 2): the flow cannot run safely as configured; see the findings in the file";
    return ArtefactResult::Fail;
  }
  detail = "check did not produce a report (exit " + std::to_string(exit_code) + "); see stderr in manifest.json";
  return ArtefactResult::Fail;
}

ArtefactResult ClassifyVerify(int exit_code, std::string& detail) {
  switch (exit_code) {
    case 0:
      detail = "source and target hold the same rows at one exact point (exit 0)";
      return ArtefactResult::Pass;
    case 1:
      detail = "MISMATCH: source and target differ (exit 1); the differing tables and chunks are in the file";
      return ArtefactResult::Fail;
    case 2:
      detail = "could not verify (exit 2): verify needs a running `trellara apply` for the flow to hold at the "
               "source's point; see stderr in manifest.json";
      return ArtefactResult::Fail;
    default:
      detail = "verify ended with exit " + std::to_string(exit_code) + "; see stderr in manifest.json";
      return ArtefactResult::Fail;
  }
}

ArtefactResult ClassifyStatus(int exit_code, const std::optional<std::string>& state, std::string& detail) {
  if (exit_code != 0) {
    detail = "status failed (exit " + std::to_string(exit_code) + "); see stderr in manifest.json";
    return ArtefactResult::Fail;
  }
  if (!state) {
    detail = "status exited 0 but its output is not JSON with a \"state\"";
    return ArtefactResult::Fail;
  }
  if (*state == "blocked" || *state == "target_unreachable") {
    detail = "flow state " + *state + ": see next_action in the file";
    return ArtefactResult::Fail;
  }
  detail = "flow state " + *state;
  return ArtefactResult::Pass;
}

ArtefactResult ClassifyInspect(int exit_code, std::string& detail) {
  if (exit_code == 0) {
    detail = "the record decodes and its checksum status is shown";
    return ArtefactResult::Pass;
  }
  detail = "inspect-transaction failed (exit " + std::to_string(exit_code) + "); see stderr in manifest.json";
  return ArtefactResult::Fail;
}

ArtefactResult ClassifySnapshot(const std::vector<SnapshotTable>& tables, std::string& detail) {
  if (tables.empty()) {
    detail = "no table of this flow was copied by `trellara snapshot` (nothing recorded on the target)";
    return ArtefactResult::Pass;
  }
  std::string unfinished;
  size_t count = 0;
  for (const SnapshotTable& t : tables) {
    if (t.state == "handoff_ready") continue;
    count++;
    if (!unfinished.empty()) unfinished += ", ";
    unfinished += t.table + " " + t.state + " (run " + t.run_id + ")";
  }
  if (count == 0) {
    detail = std::to_string(tables.size()) + " table(s), every one handoff_ready";
    return ArtefactResult::Pass;
  }
  detail = std::to_string(count) + " of " + std::to_string(tables.size()) +
           " table(s) not handoff_ready: " + unfinished + "; rerun `trellara snapshot` for the run";
  return ArtefactResult::Fail;
}

bool AllOk(const Bundle& bundle) {
  if (bundle.artefacts.empty()) return false;
  for (const Artefact& a : bundle.artefacts)
    if (!a.ok()) return false;
  return true;
}

int ExitCode(const Bundle& bundle) { return AllOk(bundle) ? kExitBundleOk : kExitBundleFailed; }

std::string Sha256Hex(std::span<const uint8_t> bytes) { return HexEncode(Sha256Of(bytes)); }

std::string Sha256Hex(const std::string& bytes) {
  return Sha256Hex(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
}

std::string FormatUtc(std::time_t t) {
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::array<char, 32> buf{};
  std::strftime(buf.data(), buf.size(), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf.data();
}

namespace {

bool NeedsQuoting(const std::string& arg) {
  if (arg.empty()) return true;
  for (char c : arg) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '-' || c == '_' || c == '.' || c == '/' || c == ':' || c == '=' || c == ',' ||
                       c == '+' || c == '@' || c == '%';
    if (!plain) return true;
  }
  return false;
}

}  // namespace

std::string QuoteCommand(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& arg : argv) {
    if (!out.empty()) out += ' ';
    if (!NeedsQuoting(arg)) {
      out += arg;
      continue;
    }
    out += '\'';
    for (char c : arg) {
      if (c == '\'') out += "'\\''";
      else out += c;
    }
    out += '\'';
  }
  return out;
}

std::string RenderManifestJson(const Bundle& bundle) {
  nlohmann::ordered_json j;
  j["tool_version"] = bundle.tool_version;
  j["flow"] = bundle.flow;
  j["created_at"] = bundle.created_at;
  j["config_path"] = bundle.config_path;
  j["verdict"] = AllOk(bundle) ? "pass" : "fail";
  j["ok"] = AllOk(bundle);
  j["artefacts"] = nlohmann::ordered_json::array();
  for (const Artefact& a : bundle.artefacts) {
    nlohmann::ordered_json e;
    e["name"] = a.name;
    e["file"] = a.file;
    e["present"] = a.present;
    e["sha256"] = a.present ? nlohmann::ordered_json(a.sha256_hex) : nlohmann::ordered_json();
    e["bytes"] = a.present ? nlohmann::ordered_json(a.bytes) : nlohmann::ordered_json();
    e["command"] = a.command;
    e["exit_code"] = a.exit_code ? nlohmann::ordered_json(*a.exit_code) : nlohmann::ordered_json();
    e["result"] = ArtefactResultName(a.result);
    e["ok"] = a.ok();
    e["detail"] = a.detail;
    e["stderr"] = a.stderr_tail;
    e["proves"] = a.proves;
    j["artefacts"].push_back(std::move(e));
  }
  // Invalid UTF-8 in a captured stderr must not make the manifest unwritable.
  return j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

std::string RenderSha256Sums(const Bundle& bundle, const std::vector<std::pair<std::string, std::string>>& extra) {
  std::string out;
  for (const Artefact& a : bundle.artefacts)
    if (a.present) out += a.sha256_hex + "  " + a.file + "\n";
  for (const auto& [file, bytes] : extra) out += Sha256Hex(bytes) + "  " + file + "\n";
  return out;
}

std::string RenderProofBundleMarkdown(const Bundle& bundle) {
  std::ostringstream md;
  const bool ok = AllOk(bundle);
  md << "# Trellara proof bundle: flow " << bundle.flow << "\n\n"
     << "- Verdict: **" << (ok ? "PASS" : "FAIL") << "**"
     << (ok ? " (every artefact below passed)\n" : " (at least one artefact failed or is missing; see below)\n")
     << "- Created: " << bundle.created_at << "\n"
     << "- Tool: trellara " << bundle.tool_version << "\n"
     << "- Configuration: `" << bundle.config_path << "`\n\n"
     << "## Artefacts\n\n"
     << "| Artefact | Result | SHA-256 |\n|---|---|---|\n";
  for (const Artefact& a : bundle.artefacts)
    md << "| " << a.file << " | " << ArtefactResultName(a.result) << " | "
       << (a.present ? "`" + a.sha256_hex + "`" : std::string("(not in the bundle)")) << " |\n";
  md << "\n";
  for (const Artefact& a : bundle.artefacts) {
    md << "### " << a.file << " — " << ArtefactResultName(a.result) << "\n\n"
       << "What it proves: " << a.proves << "\n\n"
       << "Result: " << a.detail << "\n\n"
       << "Produced by: `" << a.command << "`"
       << (a.exit_code ? " (exit " + std::to_string(*a.exit_code) + ")" : std::string()) << "\n\n";
    if (a.present) md << "Digest: `" << a.sha256_hex << "` (" << a.bytes << " bytes)\n\n";
  }
  md << "## Re-checking the digests\n\n"
     << "Every file of the bundle except SHA256SUMS itself is listed in SHA256SUMS; in the bundle "
        "directory run:\n\n"
     << "    sha256sum -c SHA256SUMS\n\n"
     << "Each line must say OK. manifest.json holds the same digests with the exact command, exit "
        "code and result of every step.\n";
  return md.str();
}

}  // namespace trellara::pilot
