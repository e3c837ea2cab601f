// pg_connection.h — the libpq adapter: the only code of the `trellara` command that includes
// libpq-fe.h. It connects, runs statements (simple, parameterised, prepared) with text parameters
// and hands back results and server errors (SQLSTATE, message, detail) as plain values.
//
// It decides nothing about data: callers build every SQL text and parameter list (core's planner
// and the apply command). It never splices a value into SQL text and never throws.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trellara/base/result.h"

struct pg_conn;
struct pg_result;

namespace trellara::cli {

using SqlParams = std::vector<std::optional<std::string>>;  // nullopt is SQL NULL

// One statement's outcome: rows (text), affected-row count, or the server's error.
class PgResult {
 public:
  bool ok() const { return ok_; }
  // SQLSTATE of a failed statement ("" when the failure was not a server error, e.g. a lost
  // connection), the primary message and the DETAIL line.
  const std::string& sqlstate() const { return sqlstate_; }
  const std::string& message() const { return message_; }
  const std::string& detail() const { return detail_; }
  const std::string& hint() const { return hint_; }
  // The CONTEXT lines (e.g. "COPY orders, line 42" for a COPY row), "" when there are none.
  const std::string& context() const { return context_; }
  // "message (SQLSTATE x): detail" for an operator.
  std::string Describe() const;

  int rows() const;
  std::optional<std::string> Value(int row, int column) const;  // nullopt for NULL
  // Rows affected by INSERT/UPDATE/DELETE (PQcmdTuples), 0 when not applicable.
  uint64_t affected() const;

 private:
  friend class PgConnection;
  std::shared_ptr<pg_result> result_;
  bool ok_ = false;
  std::string sqlstate_;
  std::string message_;
  std::string detail_;
  std::string hint_;
  std::string context_;
};

class PgConnection {
 public:
  // Connects with `conninfo`, overriding application_name. The error names the target.
  static Result<std::unique_ptr<PgConnection>> Connect(const std::string& conninfo,
                                                       const std::string& application_name);
  // "host=H port=P dbname=D user=U" of a connection string (only those present), for messages:
  // never the password or any other keyword.
  static std::string DescribeConninfo(const std::string& conninfo);
  // A replication connection (replication=database) to the same server, for replication commands
  // such as CREATE_REPLICATION_SLOT; plain SQL works on it too.
  static Result<std::unique_ptr<PgConnection>> ConnectReplication(const std::string& conninfo,
                                                                  const std::string& application_name);
  ~PgConnection();
  PgConnection(const PgConnection&) = delete;
  PgConnection& operator=(const PgConnection&) = delete;

  // Simple query protocol: may hold several statements, no parameters.
  PgResult Exec(const std::string& sql);
  // Extended protocol, unnamed statement, untyped text parameters.
  PgResult ExecParams(const std::string& sql, const SqlParams& params);
  PgResult Prepare(const std::string& name, const std::string& sql, int param_count);
  PgResult ExecPrepared(const std::string& name, const SqlParams& params);

  // ---- pipeline mode (libpq 14+) ----
  // In pipeline mode statements are queued with the Send* calls and their results read back in
  // order with NextResult(); nothing waits for the server until a result is read. Sync() ends a
  // pipeline segment: an error skips every statement queued after it up to the next Sync (the
  // server answers PipelineAborted for them), and an explicit transaction that was open at the
  // error stays aborted. The caller reads one result per Send* and one per Sync, in order.
  Status EnterPipeline();
  Status ExitPipeline();
  Status SendPrepare(const std::string& name, const std::string& sql, int param_count);
  Status SendPrepared(const std::string& name, const SqlParams& params);
  Status SendParams(const std::string& sql, const SqlParams& params);
  Status Sync();  // PQpipelineSync: also flushes everything queued to the server
  Status Flush();  // sends what is queued so far, so the server can start on it
  // The next queued statement's result. `aborted` is set when the server skipped it because an
  // earlier statement of the segment failed; `sync` when this is a Sync's answer.
  struct PipelineResult {
    PgResult result;
    bool aborted = false;
    bool sync = false;
    bool missing = false;  // no answer at all (connection lost or the stream out of step)
  };
  PipelineResult NextResult();

  // ---- COPY streaming (snapshot: source COPY TO STDOUT into target COPY FROM STDIN) ----
  // Starts a COPY statement; the result is ok when the server entered COPY OUT or COPY IN.
  PgResult StartCopy(const std::string& sql);
  // COPY OUT: the next row (one data message, as the server sent it) in `data`/`length`, valid
  // until the next call on this connection. Returns 1 with a row, 0 at the end of the data (the
  // COPY's final result is then read with FinishCopy), or an error naming the connection.
  Result<int> GetCopyData(const char** data, size_t* length);
  // COPY IN: queues one buffer (blocking only while libpq's output buffer is full).
  Status PutCopyData(const char* data, size_t length);
  // COPY IN: ends the data (abort_message set: makes the COPY fail with that message).
  Status PutCopyEnd(const char* abort_message = nullptr);
  // The COPY's final result (after GetCopyData returned 0, or after PutCopyEnd); drains the
  // connection so it is ready for the next statement.
  PgResult FinishCopy();

  bool connection_lost() const;
  // The connection is in pipeline mode (a pipelined segment was not exited, e.g. after an error).
  bool InPipeline() const;
  // The session is inside a transaction block (open or failed), e.g. after a pipelined
  // transaction failed: the caller must ROLLBACK before anything else.
  bool InTransaction() const;
  // host:port/dbname for messages (never the password).
  std::string Describe() const;

 private:
  explicit PgConnection(pg_conn* conn) : conn_(conn) {}
  PgResult Collect(pg_result* result);
  pg_conn* conn_;
  char* copy_buffer_ = nullptr;  // the last row GetCopyData handed out (PQfreemem'd on the next call)
};

}  // namespace trellara::cli
