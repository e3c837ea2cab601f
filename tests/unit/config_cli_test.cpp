// config_cli_test.cpp — the flow configuration file is loaded strictly: every error names the file,
// the setting and what it accepts, and exits 2 before anything connects.
#include <catch2/catch.hpp>

#include <fstream>
#include <csignal>
#include <sys/wait.h>
#include <unistd.h>

#include "cli_support.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_config_cli_test {

using trellara::testing::RunTrellara;

namespace {

std::string WriteConfig(const std::string& name, const std::string& text) {
  const std::string path = "/tmp/trellara-config-test-" + std::to_string(getpid()) + "-" + name + ".toml";
  std::ofstream(path) << text;
  return path;
}

const std::string kFlow = "[flow]\nname = \"app\"\nlog_directory = \"/nonexistent/log\"\n";
// A target nobody listens on: a valid configuration gets past loading and fails to connect (exit 1).
const std::string kTarget = "[target]\nconninfo = \"host=/nonexistent port=1\"\n";

}  // namespace

TEST_CASE("configuration_errors_name_the_setting_and_the_accepted_values", "[cli][config]") {
  struct Case {
    const char* name;
    std::string text;
    std::vector<std::string> expect;
  };
  const std::vector<Case> cases = {
      {"missing_target", kFlow, {"setting target.conninfo is missing", "a libpq connection string"}},
      {"missing_name", "[flow]\nlog_directory = \"/x\"\n" + kTarget, {"setting flow.name is missing"}},
      {"bad_name", "[flow]\nname = \"App-1\"\nlog_directory = \"/x\"\n" + kTarget,
       {"setting flow.name is \"App-1\"", "[a-z0-9_]"}},
      {"relative_log", "[flow]\nname = \"app\"\nlog_directory = \"log\"\n" + kTarget,
       {"flow.log_directory is \"log\" (not an absolute path)"}},
      {"unknown_table", kFlow + kTarget + "[aply]\nx = \"1\"\n", {"unknown table [aply]", "[flow], [source], [target]"}},
      {"unknown_key", kFlow + kTarget + "[apply]\nsynchronous_comit = \"on\"\n",
       {"unknown setting apply.synchronous_comit", "apply.synchronous_commit"}},
      {"bad_role", kFlow + kTarget + "[apply]\nsession_replication_role = \"local\"\n",
       {"apply.session_replication_role is \"local\"", "\"replica\" (default) or \"origin\""}},
      {"bad_sync", kFlow + kTarget + "[apply]\nsynchronous_commit = \"maybe\"\n",
       {"apply.synchronous_commit is \"maybe\"", "\"off\" (default", "\"remote_apply\""}},
      {"not_string", kFlow + kTarget + "[apply]\nsynchronous_commit = true\n", {"apply.synchronous_commit must be a string"}},
      {"bad_ddl", kFlow + kTarget + "[apply]\nddl = \"ignore\"\n",
       {"setting apply.ddl is \"ignore\"", "\"apply\" (default", "\"halt\""}},
      {"bad_ddl_case", kFlow + kTarget + "[apply]\nddl = \"Apply\"\n", {"setting apply.ddl is \"Apply\""}},
      {"bad_drop", kFlow + kTarget + "[apply]\nddl_drop_table = \"drop\"\n",
       {"setting apply.ddl_drop_table is \"drop\"", "\"keep\" (default", "\"apply\" (DROP TABLE"}},
      {"ddl_not_string", kFlow + kTarget + "[apply]\nddl = false\n", {"apply.ddl must be a string"}},
      {"bad_superseded", kFlow + kTarget + "[apply]\nsuperseded_updates = \"skip\"\n",
       {"setting apply.superseded_updates is \"skip\"", "\"leave_out\" (default", "\"send\" (every UPDATE"}},
      {"bad_early", kFlow + kTarget + "[apply]\nearly_apply = \"yes\"\n",
       {"setting apply.early_apply is \"yes\"", "\"on\" (default", "\"off\""}},
      {"early_idle_no_unit", kFlow + kTarget + "[apply]\nearly_apply_idle = \"5\"\n",
       {"setting apply.early_apply_idle is \"5\": it has no unit", "\"<N>ms\", \"<N>s\", \"<N>m\" (or \"<N>min\") or \"<N>h\""}},
      {"early_idle_too_short", kFlow + kTarget + "[apply]\nearly_apply_idle = \"50ms\"\n",
       {"setting apply.early_apply_idle is \"50ms\": out of range", "from 100ms to 60min"}},
      {"early_idle_too_long", kFlow + kTarget + "[apply]\nearly_apply_idle = \"61min\"\n",
       {"setting apply.early_apply_idle is \"61min\""}},
      {"early_idle_negative", kFlow + kTarget + "[apply]\nearly_apply_idle = \"-5s\"\n",
       {"setting apply.early_apply_idle is \"-5s\""}},
      {"bad_toml", "[flow\nname = \"app\"\n", {"is not valid TOML at line 1"}},
      {"listen_without_port", kFlow + kTarget + "[metrics]\nlisten = \"127.0.0.1\"\n",
       {"setting metrics.listen \"127.0.0.1\" has no :PORT", "HOST:PORT"}},
      {"listen_bad_port", kFlow + kTarget + "[metrics]\nlisten = \"127.0.0.1:70000\"\n",
       {"setting metrics.listen", "port 70000 is not a number 1..65535"}},
      {"listen_host_name", kFlow + kTarget + "[metrics]\nlisten = \"metrics.example:9187\"\n",
       {"setting metrics.listen", "is not an IPv4 address literal"}},
      {"listen_not_string", kFlow + kTarget + "[metrics]\nlisten = 9187\n", {"metrics.listen must be a string"}},
      {"transport_bad_kind", kFlow + kTarget + "[transport]\nkind = \"kafka\"\n", {"setting transport.kind is \"kafka\""}},
      {"transport_local_with_servers", kFlow + kTarget + "[transport]\nservers = \"nats://127.0.0.1:4222\"\n",
       {"transport.servers is set but transport.kind is \"local\""}},
      {"transport_local_with_applier", kFlow + kTarget + "[transport]\napplier = \"eu\"\n",
       {"transport.applier is set but transport.kind is \"local\""}},
      {"transport_no_servers", kFlow + kTarget + "[transport]\nkind = \"nats\"\nstream = \"S\"\n",
       {"setting transport.servers is missing"}},
      {"transport_bad_url", kFlow + kTarget + "[transport]\nkind = \"nats\"\nservers = \"http://x:1\"\nstream = \"S\"\n",
       {"transport.servers names \"http://x:1\""}},
      {"transport_bad_applier",
       kFlow + kTarget + "[transport]\nkind = \"nats\"\nservers = \"nats://127.0.0.1:1\"\nstream = \"S\"\napplier = \"e u\"\n",
       {"setting transport.applier is \"e u\""}},
      {"transport_bad_remote_appliers",
       kFlow + kTarget +
           "[transport]\nkind = \"nats\"\nservers = \"nats://127.0.0.1:1\"\nstream = \"S\"\nremote_appliers = \"eu,,us\"\n",
       {"transport.remote_appliers names \"\""}},
  };
  for (const auto& c : cases) {
    const std::string path = WriteConfig(c.name, c.text);
    auto run = RunTrellara("apply --config " + path + " --until-caught-up");
    INFO(c.name << ": " << run.all);
    CHECK(run.exit_code == 2);
    CHECK(run.all.find("configuration " + path) != std::string::npos);
    for (const auto& part : c.expect) CHECK(run.all.find(part) != std::string::npos);
    std::remove(path.c_str());
  }
}

TEST_CASE("valid_configuration_with_every_apply_setting_is_accepted", "[cli][config]") {
  const std::string path =
      WriteConfig("valid", kFlow + "[source]\nconninfo = \"dbname=src\"\n" + kTarget +
                               "[apply]\nsession_replication_role = \"origin\"\nsynchronous_commit = \"on\"\n"
                               "ddl = \"halt\"\nddl_drop_table = \"apply\"\ngroup_transactions = \"off\"\n"
                               "superseded_updates = \"send\"\nearly_apply = \"off\"\nearly_apply_idle = \"2min\"\n");
  auto run = RunTrellara("apply --config " + path + " --until-caught-up");
  INFO(run.all);
  // Loading succeeded: what fails is the log directory, named, with exit 1.
  CHECK(run.exit_code == 1);
  CHECK(run.all.find("configuration") == std::string::npos);
  CHECK(run.all.find("/nonexistent/log") != std::string::npos);
  std::remove(path.c_str());
}

TEST_CASE("a_stop_signal_while_apply_waits_for_its_log_directory_ends_it_cleanly", "[cli][config]") {
  // Nothing has been read yet when the stop comes: the stop's progress line must not touch the
  // log reader that was never opened (it did, and the process died of SIGSEGV).
  const std::string path = WriteConfig("waiting", kFlow + kTarget);
  int err_pipe[2];
  REQUIRE(pipe(err_pipe) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    dup2(err_pipe[1], STDERR_FILENO);
    close(err_pipe[0]);
    close(err_pipe[1]);
    execl(TRELLARA_BIN, TRELLARA_BIN, "apply", "--config", path.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(err_pipe[1]);
  // Waits for the applier to say it waits (a condition, not a time), then stops it.
  std::string err;
  char buf[4096];
  ssize_t n;
  while (err.find("event=waiting") == std::string::npos && (n = read(err_pipe[0], buf, sizeof buf)) > 0)
    err.append(buf, static_cast<size_t>(n));
  INFO(err);
  REQUIRE(err.find("event=waiting") != std::string::npos);
  REQUIRE(kill(child, SIGTERM) == 0);
  while ((n = read(err_pipe[0], buf, sizeof buf)) > 0) err.append(buf, static_cast<size_t>(n));
  close(err_pipe[0]);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  INFO(err);
  CHECK_FALSE(WIFSIGNALED(status));
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  std::remove(path.c_str());
}

}  // namespace unit_config_cli_test
