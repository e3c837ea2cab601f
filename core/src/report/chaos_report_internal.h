// chaos_report_internal.h — what the parts of the correctness report share (chaos_report.cpp
// decides, chaos_report_render.cpp renders, chaos_report_verify.cpp checks freshness). Internal to
// core/src/report.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "trellara/report/chaos_report.h"

namespace trellara::chaos::detail {

using nlohmann::json;

inline constexpr std::string_view kKindIntegration = "integration";
inline constexpr std::string_view kKindCtest = "ctest";
inline constexpr std::string_view kKindRegress = "pg_regress";
inline constexpr std::string_view kKindSimulation = "simulation";  // tests/sim (trellara_sim), sim.jsonl

// Display order of the suites: the seed's order, then ours.
inline constexpr std::string_view kSuiteOrder[] = {
    "simulation_replayable", "simulation_snapshot_handoff", "simulation_strict_chunk",
    "simulation_fleet_fanin", "simulation_qualification",    "curated",
    "design",
};

inline std::string SuiteTitle(std::string_view suite) {
  if (suite == "simulation_replayable") return "Replayable Simulation Suite";
  if (suite == "simulation_snapshot_handoff") return "Snapshot Handoff Simulation Suite";
  if (suite == "simulation_strict_chunk") return "Strict Chunk Simulation Suite";
  if (suite == "simulation_fleet_fanin") return "Fleet Fan-In Lake Simulation Suite";
  if (suite == "simulation_qualification") return "Lane D Qualification Suite";
  if (suite == "curated") return "Curated Failure Matrix";
  if (suite == "design") return "Trellara Boundaries (DESIGN §2, not in seed 000)";
  return std::string(suite);
}

int SuiteRank(std::string_view suite);
json ResultJson(const ScenarioResult& r);
// The fields of a row scripts depend on (header: RenderJson), shared by the JSON report and the
// verified projection.
json RowContract(const RowDecision& d);

}  // namespace trellara::chaos::detail
