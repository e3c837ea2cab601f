// pilot_package_test.cpp — `trellara pilot-package`'s decisions (core pilot_package.h): how each
// step's outcome is classified, the overall verdict and exit code, the digests, and the
// manifest.json / SHA256SUMS / proof-bundle.md renderings.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "trellara/report/pilot_package.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_pilot_package_test {

using namespace trellara::pilot;

namespace {

Artefact Present(const std::string& name, const std::string& file, const std::string& bytes, ArtefactResult result) {
  Artefact a;
  a.name = name;
  a.file = file;
  a.proves = "proves " + name;
  a.command = "/usr/bin/trellara " + name + " --config /etc/trellara/app.toml";
  a.exit_code = result == ArtefactResult::Pass ? 0 : 1;
  a.result = result;
  a.detail = "detail of " + name;
  a.present = true;
  a.bytes = bytes.size();
  a.sha256_hex = Sha256Hex(bytes);
  return a;
}

Artefact Missing(const std::string& name, const std::string& file) {
  Artefact a;
  a.name = name;
  a.file = file;
  a.proves = "proves " + name;
  a.command = "copy of /nowhere/" + file;
  a.result = ArtefactResult::Missing;
  a.detail = "no such file; generate it";
  return a;
}

Bundle Healthy() {
  Bundle b;
  b.tool_version = "0.1.0";
  b.flow = "app";
  b.created_at = FormatUtc(0);
  b.config_path = "/etc/trellara/app.toml";
  b.artefacts = {Present("check", "check.json", "{\"status\":\"ok\"}\n", ArtefactResult::Pass),
                 Present("verify", "verify.json", "{}\n", ArtefactResult::Pass)};
  return b;
}

}  // namespace

TEST_CASE("SHA-256 hex digests match the known test vectors", "[pilot_package]") {
  CHECK(Sha256Hex(std::string()) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(Sha256Hex(std::string("abc")) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_CASE("each step's exit code is classified as the step documents it", "[pilot_package]") {
  std::string detail;
  CHECK(ClassifyCheck(0, detail) == ArtefactResult::Pass);
  CHECK(ClassifyCheck(2, detail) == ArtefactResult::Fail);
  CHECK(detail.find("critical") != std::string::npos);
  CHECK(ClassifyCheck(1, detail) == ArtefactResult::Fail);

  CHECK(ClassifyVerify(0, detail) == ArtefactResult::Pass);
  CHECK(ClassifyVerify(1, detail) == ArtefactResult::Fail);
  CHECK(detail.find("MISMATCH") != std::string::npos);
  CHECK(ClassifyVerify(2, detail) == ArtefactResult::Fail);
  CHECK(detail.find("could not verify") != std::string::npos);
  CHECK(ClassifyVerify(70, detail) == ArtefactResult::Fail);

  CHECK(ClassifyStatus(0, std::string("caught_up"), detail) == ArtefactResult::Pass);
  CHECK(ClassifyStatus(0, std::string("running"), detail) == ArtefactResult::Pass);
  CHECK(ClassifyStatus(0, std::string("blocked"), detail) == ArtefactResult::Fail);
  CHECK(ClassifyStatus(0, std::string("target_unreachable"), detail) == ArtefactResult::Fail);
  CHECK(ClassifyStatus(0, std::nullopt, detail) == ArtefactResult::Fail);
  CHECK(ClassifyStatus(2, std::string("caught_up"), detail) == ArtefactResult::Fail);

  CHECK(ClassifyInspect(0, detail) == ArtefactResult::Pass);
  CHECK(ClassifyInspect(2, detail) == ArtefactResult::Fail);
}

TEST_CASE("the snapshot passes only when every recorded table was handed off", "[pilot_package]") {
  std::string detail;
  CHECK(ClassifySnapshot({}, detail) == ArtefactResult::Pass);
  CHECK(detail.find("no table") != std::string::npos);
  CHECK(ClassifySnapshot({{"public.a", "r1", "handoff_ready"}, {"public.b", "r1", "handoff_ready"}}, detail) ==
        ArtefactResult::Pass);
  CHECK(ClassifySnapshot({{"public.a", "r1", "handoff_ready"}, {"public.b", "r1", "failed_recoverable"}}, detail) ==
        ArtefactResult::Fail);
  CHECK(detail.find("public.b failed_recoverable") != std::string::npos);
  CHECK(detail.find("public.a") == std::string::npos);
  CHECK(ClassifySnapshot({{"public.a", "r1", "copied"}}, detail) == ArtefactResult::Fail);
}

TEST_CASE("the verdict is pass only when every artefact passed", "[pilot_package]") {
  Bundle b = Healthy();
  CHECK(AllOk(b));
  CHECK(ExitCode(b) == trellara::kExitBundleOk);

  b.artefacts.push_back(Missing("correctness_report", "correctness-report.html"));
  CHECK_FALSE(AllOk(b));
  CHECK(ExitCode(b) == trellara::kExitBundleFailed);

  Bundle failed = Healthy();
  failed.artefacts[1].result = ArtefactResult::Fail;
  CHECK(ExitCode(failed) == trellara::kExitBundleFailed);

  Bundle empty;
  CHECK_FALSE(AllOk(empty));  // a bundle with nothing in it proves nothing
}

TEST_CASE("the manifest records every artefact with digest, command, exit code and result", "[pilot_package]") {
  Bundle b = Healthy();
  b.artefacts.push_back(Missing("correctness_report", "correctness-report.html"));
  b.artefacts[0].stderr_tail = std::string("bad \xff byte");
  auto j = nlohmann::json::parse(RenderManifestJson(b));
  CHECK(j["tool_version"] == "0.1.0");
  CHECK(j["flow"] == "app");
  CHECK(j["created_at"] == "1970-01-01T00:00:00Z");
  CHECK(j["config_path"] == "/etc/trellara/app.toml");
  CHECK(j["verdict"] == "fail");
  CHECK(j["ok"] == false);
  REQUIRE(j["artefacts"].size() == 3);
  const auto& check = j["artefacts"][0];
  CHECK(check["file"] == "check.json");
  CHECK(check["sha256"] == Sha256Hex(std::string("{\"status\":\"ok\"}\n")));
  CHECK(check["bytes"] == 16);
  CHECK(check["exit_code"] == 0);
  CHECK(check["ok"] == true);
  CHECK(check["result"] == "pass");
  CHECK(check["command"] == "/usr/bin/trellara check --config /etc/trellara/app.toml");
  const auto& report = j["artefacts"][2];
  CHECK(report["present"] == false);
  CHECK(report["sha256"].is_null());
  CHECK(report["bytes"].is_null());
  CHECK(report["exit_code"].is_null());
  CHECK(report["result"] == "missing");
  CHECK(report["ok"] == false);

  Bundle ok = Healthy();
  CHECK(nlohmann::json::parse(RenderManifestJson(ok))["verdict"] == "pass");
}

TEST_CASE("SHA256SUMS lists present artefacts and the extra files in sha256sum format", "[pilot_package]") {
  Bundle b = Healthy();
  b.artefacts.push_back(Missing("correctness_report", "correctness-report.html"));
  const std::string sums = RenderSha256Sums(b, {{"manifest.json", "abc"}});
  CHECK(sums == Sha256Hex(std::string("{\"status\":\"ok\"}\n")) + "  check.json\n" + Sha256Hex(std::string("{}\n")) +
                    "  verify.json\n" + "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad  manifest.json\n");
}

TEST_CASE("proof-bundle.md states the verdict, each result and digest, and how to re-check", "[pilot_package]") {
  Bundle b = Healthy();
  std::string md = RenderProofBundleMarkdown(b);
  CHECK(md.find("Verdict: **PASS**") != std::string::npos);
  CHECK(md.find(b.artefacts[0].sha256_hex) != std::string::npos);
  CHECK(md.find("sha256sum -c SHA256SUMS") != std::string::npos);
  CHECK(md.find("proves check") != std::string::npos);

  b.artefacts.push_back(Missing("correctness_report", "correctness-report.html"));
  md = RenderProofBundleMarkdown(b);
  CHECK(md.find("Verdict: **FAIL**") != std::string::npos);
  CHECK(md.find("| correctness-report.html | missing | (not in the bundle) |") != std::string::npos);
  CHECK(md.find("no such file; generate it") != std::string::npos);
}

TEST_CASE("commands are quoted so they can be re-run as written", "[pilot_package]") {
  CHECK(QuoteCommand({"/usr/bin/trellara", "check", "--config", "/etc/a.toml"}) ==
        "/usr/bin/trellara check --config /etc/a.toml");
  CHECK(QuoteCommand({"trellara", "--config", "/tmp/my flow.toml", ""}) == "trellara --config '/tmp/my flow.toml' ''");
  CHECK(QuoteCommand({"a'b", "$HOME"}) == "'a'\\''b' '$HOME'");
}

}  // namespace unit_pilot_package_test
