// pg_connection.cpp — the libpq adapter (see pg_connection.h). The only file that includes
// libpq-fe.h; it translates libpq's C API into values and never interprets the data it carries.
#include "pg/pg_connection.h"

#include <libpq-fe.h>

#include <cstdio>
#include <cstdlib>

namespace trellara::cli {
namespace {

std::string Field(const PGresult* result, int field) {
  const char* value = PQresultErrorField(result, field);
  return value ? std::string(value) : std::string();
}

std::string TrimNewline(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// Notices (e.g. "schema already exists, skipping") are not errors; the apply session raises
// client_min_messages to warning, and whatever still arrives goes to stderr marked as the server's.
void PrintNotice(void*, const char* message) {
  std::fprintf(stderr, "trellara: target server: %s", message);
}

struct ParamArrays {
  std::vector<const char*> values;
  explicit ParamArrays(const SqlParams& params) {
    values.reserve(params.size());
    for (const auto& p : params) values.push_back(p ? p->c_str() : nullptr);
  }
};

}  // namespace

std::string PgResult::Describe() const {
  std::string text = message_;
  if (!sqlstate_.empty()) text += " (SQLSTATE " + sqlstate_ + ")";
  if (!detail_.empty()) text += ": " + detail_;
  return text;
}

int PgResult::rows() const { return result_ ? PQntuples(result_.get()) : 0; }

std::optional<std::string> PgResult::Value(int row, int column) const {
  if (!result_ || row >= PQntuples(result_.get()) || column >= PQnfields(result_.get())) return std::nullopt;
  if (PQgetisnull(result_.get(), row, column)) return std::nullopt;
  return std::string(PQgetvalue(result_.get(), row, column),
                     static_cast<size_t>(PQgetlength(result_.get(), row, column)));
}

uint64_t PgResult::affected() const {
  if (!result_) return 0;
  const char* text = PQcmdTuples(result_.get());
  return (text && *text) ? std::strtoull(text, nullptr, 10) : 0;
}

std::string PgConnection::DescribeConninfo(const std::string& conninfo) {
  char* error = nullptr;
  PQconninfoOption* options = PQconninfoParse(conninfo.c_str(), &error);
  if (options == nullptr) {
    // The parse error quotes no value of the string, only what is wrong with its form.
    std::string message = error ? TrimNewline(error) : "out of memory";
    if (error) PQfreemem(error);
    return "an unparsable connection string (" + message + ")";
  }
  // Only where and as whom: never password, sslpassword or any other keyword.
  std::string out;
  for (const char* keyword : {"host", "hostaddr", "port", "dbname", "user"}) {
    for (PQconninfoOption* o = options; o->keyword != nullptr; o++) {
      if (std::string(o->keyword) != keyword || o->val == nullptr || *o->val == '\0') continue;
      out += (out.empty() ? "" : " ") + std::string(keyword) + "=" + o->val;
    }
  }
  PQconninfoFree(options);
  return out.empty() ? "the default server (no host, port, dbname or user in the connection string)" : out;
}

Result<std::unique_ptr<PgConnection>> PgConnection::Connect(const std::string& conninfo,
                                                            const std::string& application_name) {
  // expand_dbname=1: the first "dbname" is the whole connection string; later keywords override it.
  const char* keywords[] = {"dbname", "application_name", nullptr};
  const char* values[] = {conninfo.c_str(), application_name.c_str(), nullptr};
  PGconn* conn = PQconnectdbParams(keywords, values, 1);
  if (conn == nullptr) return MakeError("cannot allocate a libpq connection (out of memory)");
  if (PQstatus(conn) != CONNECTION_OK) {
    std::string message = TrimNewline(PQerrorMessage(conn));
    PQfinish(conn);
    return MakeError("cannot connect to " + DescribeConninfo(conninfo) + " (" + message +
                     "); check the conninfo and that the server is running");
  }
  PQsetNoticeProcessor(conn, PrintNotice, nullptr);
  return std::unique_ptr<PgConnection>(new PgConnection(conn));
}

Result<std::unique_ptr<PgConnection>> PgConnection::ConnectReplication(const std::string& conninfo,
                                                                       const std::string& application_name) {
  // The same connection string with replication=database: the walsender accepts both SQL and
  // replication commands (CREATE_REPLICATION_SLOT ... SNAPSHOT 'export').
  const char* keywords[] = {"dbname", "application_name", "replication", nullptr};
  const char* values[] = {conninfo.c_str(), application_name.c_str(), "database", nullptr};
  PGconn* conn = PQconnectdbParams(keywords, values, 1);
  if (conn == nullptr) return MakeError("cannot allocate a libpq connection (out of memory)");
  if (PQstatus(conn) != CONNECTION_OK) {
    std::string message = TrimNewline(PQerrorMessage(conn));
    PQfinish(conn);
    return MakeError("cannot open a replication connection to the source (" + message +
                     "); the role needs the REPLICATION attribute and pg_hba.conf must allow it");
  }
  PQsetNoticeProcessor(conn, PrintNotice, nullptr);
  return std::unique_ptr<PgConnection>(new PgConnection(conn));
}

PgConnection::~PgConnection() {
  if (copy_buffer_) PQfreemem(copy_buffer_);
  PQfinish(conn_);
}

PgResult PgConnection::StartCopy(const std::string& sql) {
  PGresult* raw = PQexec(conn_, sql.c_str());
  const ExecStatusType status = raw ? PQresultStatus(raw) : PGRES_FATAL_ERROR;
  if (status == PGRES_COPY_OUT || status == PGRES_COPY_IN) {
    PgResult out;
    out.result_ = std::shared_ptr<pg_result>(raw, [](PGresult* r) { PQclear(r); });
    out.ok_ = true;
    return out;
  }
  PgResult out = Collect(raw);
  if (out.ok_) {  // a statement that was not a COPY: a caller's bug, never silently accepted
    out.ok_ = false;
    out.message_ = "the statement did not start a COPY";
  }
  return out;
}

Result<int> PgConnection::GetCopyData(const char** data, size_t* length) {
  if (copy_buffer_) {
    PQfreemem(copy_buffer_);
    copy_buffer_ = nullptr;
  }
  const int n = PQgetCopyData(conn_, &copy_buffer_, 0);
  if (n >= 0) {
    *data = copy_buffer_;
    *length = static_cast<size_t>(n);
    return 1;
  }
  if (n == -1) return 0;
  return MakeError("reading COPY data from " + Describe() + " failed: " + TrimNewline(PQerrorMessage(conn_)));
}

Status PgConnection::PutCopyData(const char* data, size_t length) {
  if (PQputCopyData(conn_, data, static_cast<int>(length)) != 1)
    return MakeError("sending COPY data to " + Describe() + " failed: " + TrimNewline(PQerrorMessage(conn_)));
  return Status::Ok();
}

Status PgConnection::PutCopyEnd(const char* abort_message) {
  if (PQputCopyEnd(conn_, abort_message) != 1)
    return MakeError("ending the COPY on " + Describe() + " failed: " + TrimNewline(PQerrorMessage(conn_)));
  return Status::Ok();
}

PgResult PgConnection::FinishCopy() {
  PGresult* first = PQgetResult(conn_);
  PgResult out = Collect(first);
  // Drain: a COPY ends with exactly one result, then NULL; anything else is read and dropped so
  // the connection is ready for the next statement (its error, if any, is already in `out`).
  while (PGresult* extra = PQgetResult(conn_)) {
    const ExecStatusType status = PQresultStatus(extra);
    PQclear(extra);
    // Still in a COPY: the caller abandons this connection (never loop on it).
    if (status == PGRES_COPY_OUT || status == PGRES_COPY_IN || status == PGRES_COPY_BOTH) break;
  }
  return out;
}

PgResult PgConnection::Collect(PGresult* raw) {
  PgResult out;
  out.result_ = std::shared_ptr<pg_result>(raw, [](PGresult* r) { PQclear(r); });
  const ExecStatusType status = raw ? PQresultStatus(raw) : PGRES_FATAL_ERROR;
  out.ok_ = status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK;
  if (!out.ok_) {
    if (raw) {
      out.sqlstate_ = Field(raw, PG_DIAG_SQLSTATE);
      out.message_ = Field(raw, PG_DIAG_MESSAGE_PRIMARY);
      out.detail_ = Field(raw, PG_DIAG_MESSAGE_DETAIL);
      out.hint_ = Field(raw, PG_DIAG_MESSAGE_HINT);
      out.context_ = Field(raw, PG_DIAG_CONTEXT);
    }
    if (out.message_.empty()) out.message_ = TrimNewline(PQerrorMessage(conn_));
  }
  return out;
}

PgResult PgConnection::Exec(const std::string& sql) { return Collect(PQexec(conn_, sql.c_str())); }

PgResult PgConnection::ExecParams(const std::string& sql, const SqlParams& params) {
  ParamArrays a(params);
  return Collect(PQexecParams(conn_, sql.c_str(), static_cast<int>(params.size()), nullptr, a.values.data(),
                              nullptr, nullptr, 0));
}

PgResult PgConnection::Prepare(const std::string& name, const std::string& sql, int param_count) {
  return Collect(PQprepare(conn_, name.c_str(), sql.c_str(), param_count, nullptr));
}

PgResult PgConnection::ExecPrepared(const std::string& name, const SqlParams& params) {
  ParamArrays a(params);
  return Collect(PQexecPrepared(conn_, name.c_str(), static_cast<int>(params.size()), a.values.data(), nullptr,
                                nullptr, 0));
}

Status PgConnection::EnterPipeline() {
  if (PQenterPipelineMode(conn_) != 1)
    return MakeError("cannot enter pipeline mode on " + Describe() + ": " + TrimNewline(PQerrorMessage(conn_)));
  return Status::Ok();
}

bool PgConnection::InPipeline() const { return conn_ != nullptr && PQpipelineStatus(conn_) != PQ_PIPELINE_OFF; }

Status PgConnection::ExitPipeline() {
  if (PQexitPipelineMode(conn_) != 1)
    return MakeError("cannot leave pipeline mode on " + Describe() + ": " + TrimNewline(PQerrorMessage(conn_)));
  return Status::Ok();
}

namespace {
Status Sent(PGconn* conn, int rc, const char* what) {
  if (rc == 1) return Status::Ok();
  return MakeError(std::string("cannot queue ") + what + " on the target: " + TrimNewline(PQerrorMessage(conn)));
}
}  // namespace

Status PgConnection::SendPrepare(const std::string& name, const std::string& sql, int param_count) {
  return Sent(conn_, PQsendPrepare(conn_, name.c_str(), sql.c_str(), param_count, nullptr), "a Parse");
}

Status PgConnection::SendPrepared(const std::string& name, const SqlParams& params) {
  ParamArrays a(params);
  return Sent(conn_,
              PQsendQueryPrepared(conn_, name.c_str(), static_cast<int>(params.size()), a.values.data(), nullptr,
                                  nullptr, 0),
              "a statement");
}

Status PgConnection::SendParams(const std::string& sql, const SqlParams& params) {
  ParamArrays a(params);
  return Sent(conn_,
              PQsendQueryParams(conn_, sql.c_str(), static_cast<int>(params.size()), nullptr, a.values.data(),
                                nullptr, nullptr, 0),
              "a statement");
}

Status PgConnection::Flush() {
  if (PQflush(conn_) == 0) return Status::Ok();
  return MakeError("cannot send queued statements to the target: " + TrimNewline(PQerrorMessage(conn_)));
}

Status PgConnection::Sync() { return Sent(conn_, PQpipelineSync(conn_), "a pipeline Sync"); }

PgConnection::PipelineResult PgConnection::NextResult() {
  PipelineResult out;
  PGresult* raw = PQgetResult(conn_);
  if (raw == nullptr) {
    // A lost connection (or a protocol error) ends the result stream early.
    out.result = Collect(nullptr);
    out.missing = true;
    return out;
  }
  const ExecStatusType status = PQresultStatus(raw);
  if (status == PGRES_PIPELINE_SYNC) {
    out.sync = true;
    out.result = Collect(raw);
    out.result.ok_ = true;
    return out;  // a Sync's answer is not followed by a NULL
  }
  if (status == PGRES_PIPELINE_ABORTED) {
    out.aborted = true;
    out.result = Collect(raw);
    out.result.message_ = "skipped: an earlier statement of the same pipeline failed";
  } else {
    out.result = Collect(raw);
  }
  // Every statement's results end with a NULL.
  while (PGresult* extra = PQgetResult(conn_)) PQclear(extra);
  return out;
}

bool PgConnection::connection_lost() const { return PQstatus(conn_) != CONNECTION_OK; }

bool PgConnection::InTransaction() const {
  const PGTransactionStatusType status = PQtransactionStatus(conn_);
  return status == PQTRANS_INTRANS || status == PQTRANS_INERROR;
}

std::string PgConnection::Describe() const {
  const char* host = PQhost(conn_);
  const char* port = PQport(conn_);
  const char* db = PQdb(conn_);
  return std::string(host ? host : "?") + ":" + (port ? port : "?") + "/" + (db ? db : "?");
}

}  // namespace trellara::cli
