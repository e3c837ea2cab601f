// nats_stream.cpp — one flow's JetStream stream through libnats (nats_stream.h).
#include "broker/nats_stream.h"

#include <nats/nats.h>

#include <algorithm>
#include <cstring>

namespace trellara::cli::broker {
namespace {

// Debian's nats-server keeps a stream's duplicate window as nanoseconds.
constexpr int64_t kDuplicateWindowNs = 120ll * 1000 * 1000 * 1000;
constexpr int64_t kConnectTimeoutMs = 2000;
constexpr int64_t kReconnectWaitMs = 250;

std::string StatusText(natsStatus status, jsErrCode code = static_cast<jsErrCode>(0)) {
  std::string text = natsStatus_GetText(status);
  const char* detail = nats_GetLastError(nullptr);
  if (detail != nullptr && *detail != '\0' && text.find(detail) == std::string::npos) text += std::string(": ") + detail;
  if (code != 0) text += " (JetStream error " + std::to_string(static_cast<int>(code)) + ")";
  return text;
}

}  // namespace

struct NatsStream::Handles {
  natsOptions* options = nullptr;
  natsConnection* connection = nullptr;
  jsCtx* js = nullptr;
  natsSubscription* reading = nullptr;
  std::map<std::string, natsSubscription*> listening;
  ~Handles() {
    if (reading != nullptr) natsSubscription_Destroy(reading);
    for (auto& [subject, sub] : listening) natsSubscription_Destroy(sub);
    if (js != nullptr) jsCtx_Destroy(js);
    if (connection != nullptr) natsConnection_Destroy(connection);
    if (options != nullptr) natsOptions_Destroy(options);
  }
};

Result<std::unique_ptr<NatsStream>> NatsStream::Open(const StreamSettings& settings) {
  if (settings.servers.empty()) return MakeError("no broker servers to connect to ([transport] servers)");
  std::unique_ptr<NatsStream> stream(new NatsStream(settings));
  TRELLARA_TRY(stream->Connect());
  TRELLARA_TRY(stream->EnsureStream());
  return stream;
}

NatsStream::NatsStream(StreamSettings settings) : settings_(std::move(settings)) {}
NatsStream::~NatsStream() = default;

Status NatsStream::Connect() {
  handles_ = std::make_unique<Handles>();
  std::vector<const char*> urls;
  for (const auto& server : settings_.servers) urls.push_back(server.c_str());
  natsStatus s = natsOptions_Create(&handles_->options);
  if (s == NATS_OK) s = natsOptions_SetServers(handles_->options, urls.data(), static_cast<int>(urls.size()));
  if (s == NATS_OK) s = natsOptions_SetName(handles_->options, "trellara");
  if (s == NATS_OK) s = natsOptions_SetTimeout(handles_->options, kConnectTimeoutMs);
  // Reconnect for as long as the process runs: a node restarting is the broker's normal life.
  if (s == NATS_OK) s = natsOptions_SetMaxReconnect(handles_->options, -1);
  if (s == NATS_OK) s = natsOptions_SetReconnectWait(handles_->options, kReconnectWaitMs);
  if (s == NATS_OK && !settings_.credentials.empty())
    s = natsOptions_SetUserCredentialsFromFiles(handles_->options, settings_.credentials.c_str(), nullptr);
  if (s != NATS_OK) return MakeError("cannot set up the broker connection options: " + StatusText(s));
  s = natsConnection_Connect(&handles_->connection, handles_->options);
  if (s != NATS_OK) {
    std::string servers;
    for (const auto& server : settings_.servers) servers += (servers.empty() ? "" : ", ") + server;
    return MakeError("cannot connect to the broker at " + servers + ": " + StatusText(s));
  }
  jsOptions js_options;
  jsOptions_Init(&js_options);
  js_options.Wait = settings_.publish_wait_ms;
  s = natsConnection_JetStream(&handles_->js, handles_->connection, &js_options);
  if (s != NATS_OK) return MakeError("cannot open JetStream on the broker connection: " + StatusText(s));
  return Status::Ok();
}

Status NatsStream::EnsureStream() {
  jsStreamInfo* info = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  natsStatus s = js_GetStreamInfo(&info, handles_->js, settings_.stream.c_str(), nullptr, &code);
  if (s == NATS_OK) {
    bool holds_subject = false;
    for (int i = 0; i < info->Config->SubjectsLen; i++)
      holds_subject |= settings_.stream_subjects == info->Config->Subjects[i];
    const int64_t replicas = info->Config->Replicas;
    jsStreamInfo_Destroy(info);
    if (!holds_subject)
      return MakeError("stream " + settings_.stream + " exists on the broker but does not hold subjects " +
                       settings_.stream_subjects + "; name another stream ([transport] stream) or add the subjects to it");
    if (replicas != settings_.replicas)
      return MakeError("stream " + settings_.stream + " has " + std::to_string(replicas) + " replicas, the flow needs " +
                       std::to_string(settings_.replicas) + " (a record is safe only once a quorum stored it)");
    return Status::Ok();
  }
  if (s != NATS_NOT_FOUND && code != JSStreamNotFoundErr)
    return MakeError("cannot read stream " + settings_.stream + " on the broker: " + StatusText(s, code));
  jsStreamConfig config;
  jsStreamConfig_Init(&config);
  const char* subjects[] = {settings_.stream_subjects.c_str()};
  config.Name = settings_.stream.c_str();
  config.Subjects = subjects;
  config.SubjectsLen = 1;
  config.Storage = js_FileStorage;
  config.Replicas = settings_.replicas;
  config.Duplicates = kDuplicateWindowNs;
  config.DenyDelete = false;  // the tests delete a message to play a broker that lost it
  s = js_AddStream(&info, handles_->js, &config, nullptr, &code);
  if (s != NATS_OK)
    return MakeError("cannot create stream " + settings_.stream + " (subjects " + settings_.stream_subjects + ", " +
                     std::to_string(settings_.replicas) + " replicas, file storage) on the broker: " +
                     StatusText(s, code));
  jsStreamInfo_Destroy(info);
  return Status::Ok();
}

Result<std::optional<NatsStream::Last>> NatsStream::LastRecord() {
  natsMsg* message = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  natsStatus s = js_GetLastMsg(&message, handles_->js, settings_.stream.c_str(), settings_.subject.c_str(), nullptr,
                               &code);
  if (s == NATS_NOT_FOUND || code == JSNoMessageFoundErr) return std::optional<Last>();
  if (s != NATS_OK)
    return MakeError("cannot read the last record of " + settings_.subject + " in stream " + settings_.stream + ": " +
                     StatusText(s, code));
  const char* id = nullptr;
  natsStatus header = natsMsgHeader_Get(message, "Nats-Msg-Id", &id);
  Last last;
  last.sequence = natsMsg_GetSequence(message);
  if (header == NATS_OK && id != nullptr) last.message_id = id;
  natsMsg_Destroy(message);
  if (last.message_id.empty())
    return MakeError("the last record of " + settings_.subject + " in stream " + settings_.stream + " (sequence " +
                     std::to_string(last.sequence) + ") has no deduplication id: something other than trellara "
                     "forward publishes on the flow's subject");
  return std::optional<Last>(last);
}

NatsStream::Published NatsStream::Publish(const std::string& message_id, std::optional<uint64_t> expected_last_sequence,
                                          const std::vector<std::pair<std::string, std::string>>& headers,
                                          std::span<const uint8_t> payload, const std::string& subject) {
  Published out;
  natsMsg* message = nullptr;
  natsStatus s = natsMsg_Create(&message, subject.empty() ? settings_.subject.c_str() : subject.c_str(), nullptr,
                                reinterpret_cast<const char*>(payload.data()), static_cast<int>(payload.size()));
  for (const auto& [key, value] : headers)
    if (s == NATS_OK) s = natsMsgHeader_Set(message, key.c_str(), value.c_str());
  if (s != NATS_OK) {
    if (message != nullptr) natsMsg_Destroy(message);
    out.error = PublishError{PublishFailure::Refused, "cannot build the message: " + StatusText(s)};
    return out;
  }
  jsPubOptions options;
  jsPubOptions_Init(&options);
  options.MsgId = message_id.c_str();
  options.MaxWait = settings_.publish_wait_ms;
  if (expected_last_sequence && *expected_last_sequence == 0)
    options.ExpectNoMessage = true;
  else if (expected_last_sequence)
    options.ExpectLastSubjectSeq = *expected_last_sequence;
  jsPubAck* ack = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  s = js_PublishMsg(&ack, handles_->js, message, &options, &code);
  natsMsg_Destroy(message);
  if (s == NATS_OK && ack != nullptr) {
    out.ack = PublishAck{ack->Sequence, ack->Duplicate};
    jsPubAck_Destroy(ack);
    return out;
  }
  if (ack != nullptr) jsPubAck_Destroy(ack);
  PublishError error;
  error.message = StatusText(s, code);
  if (code == JSStreamWrongLastSequenceErr)
    error.kind = PublishFailure::WrongLast;
  else if (code == JSStreamNotFoundErr || code == JSStreamNotMatchErr)
    error.kind = PublishFailure::Refused;
  else
    error.kind = PublishFailure::Unavailable;  // no quorum, a timeout, no responders, a connection down
  out.error = error;
  return out;
}

Status NatsStream::StartReading(uint64_t from_sequence) {
  if (handles_->reading != nullptr) {
    natsSubscription_Destroy(handles_->reading);
    handles_->reading = nullptr;
  }
  jsSubOptions options;
  jsSubOptions_Init(&options);
  options.Stream = settings_.stream.c_str();
  options.Ordered = true;
  options.Config.DeliverPolicy = js_DeliverByStartSequence;
  options.Config.OptStartSeq = std::max<uint64_t>(from_sequence, 1);
  jsErrCode code = static_cast<jsErrCode>(0);
  natsStatus s = js_SubscribeSync(&handles_->reading, handles_->js, settings_.stream_subjects.c_str(), nullptr,
                                  &options, &code);
  if (s != NATS_OK) {
    handles_->reading = nullptr;
    return MakeError("cannot read stream " + settings_.stream + " from sequence " + std::to_string(from_sequence) +
                     ": " + StatusText(s, code));
  }
  // The ordered consumer is flow controlled by the server; the client's pending limits are the
  // second bound on what waits in memory.
  natsSubscription_SetPendingLimits(handles_->reading, 65536, 256 * 1024 * 1024);
  return Status::Ok();
}

Result<uint64_t> NatsStream::LastSequence() {
  jsStreamInfo* info = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  natsStatus s = js_GetStreamInfo(&info, handles_->js, settings_.stream.c_str(), nullptr, &code);
  if (s != NATS_OK) return MakeError("cannot read stream " + settings_.stream + ": " + StatusText(s, code));
  const uint64_t last = info->State.LastSeq;
  jsStreamInfo_Destroy(info);
  return last;
}

Result<std::optional<NatsStream::Delivered>> NatsStream::Read(int64_t timeout_ms) {
  if (handles_->reading == nullptr) return MakeError("stream " + settings_.stream + " is not being read");
  natsMsg* message = nullptr;
  natsStatus s = natsSubscription_NextMsg(&message, handles_->reading, std::max<int64_t>(timeout_ms, 1));
  if (s == NATS_TIMEOUT) return std::optional<Delivered>();
  if (s != NATS_OK) return MakeError("reading stream " + settings_.stream + ": " + StatusText(s));
  Delivered d;
  jsMsgMetaData* meta = nullptr;
  if (natsMsg_GetMetaData(&meta, message) == NATS_OK && meta != nullptr) {
    d.sequence = meta->Sequence.Stream;
    jsMsgMetaData_Destroy(meta);
  }
  d.subject = natsMsg_GetSubject(message);
  auto header = [&](const char* key) -> std::optional<std::string> {
    const char* value = nullptr;
    if (natsMsgHeader_Get(message, key, &value) == NATS_OK && value != nullptr) return std::string(value);
    return std::nullopt;
  };
  d.message_id = header("Nats-Msg-Id").value_or("");
  auto number = [](const std::optional<std::string>& text) -> std::optional<uint64_t> {
    if (!text || text->empty() || text->size() > 20 || text->find_first_not_of("0123456789") != std::string::npos)
      return std::nullopt;
    return std::stoull(*text);
  };
  d.offset = number(header("Trellara-Offset"));
  if (auto type = number(header("Trellara-Type")); type && *type <= 255) d.type = static_cast<uint8_t>(*type);
  d.commit_lsn = header("Trellara-Commit-Lsn").value_or("");
  const char* data = natsMsg_GetData(message);
  const int length = natsMsg_GetDataLength(message);
  if (data != nullptr && length > 0) d.payload.assign(data, data + length);
  natsMsg_Destroy(message);
  if (d.sequence == 0)
    return MakeError("stream " + settings_.stream + " delivered a message without its stream sequence");
  return std::optional<Delivered>(std::move(d));
}

Status NatsStream::Send(const std::string& subject, const std::string& text) {
  natsStatus s = natsConnection_Publish(handles_->connection, subject.c_str(), text.data(), static_cast<int>(text.size()));
  if (s == NATS_OK) s = natsConnection_FlushTimeout(handles_->connection, kConnectTimeoutMs);
  if (s != NATS_OK) return MakeError("cannot send on " + subject + ": " + StatusText(s));
  return Status::Ok();
}

Result<std::string> NatsStream::Ask(const std::string& subject, const std::string& text, int64_t timeout_ms) {
  natsMsg* reply = nullptr;
  natsStatus s = natsConnection_Request(&reply, handles_->connection, subject.c_str(), text.data(),
                                        static_cast<int>(text.size()), timeout_ms);
  if (s != NATS_OK) return MakeError("no answer on " + subject + ": " + StatusText(s));
  std::string answer(natsMsg_GetData(reply) ? natsMsg_GetData(reply) : "", natsMsg_GetDataLength(reply));
  natsMsg_Destroy(reply);
  return answer;
}

Status NatsStream::Listen(const std::string& subject) {
  if (handles_->listening.count(subject)) return Status::Ok();
  natsSubscription* sub = nullptr;
  natsStatus s = natsConnection_SubscribeSync(&sub, handles_->connection, subject.c_str());
  if (s == NATS_OK) s = natsConnection_FlushTimeout(handles_->connection, kConnectTimeoutMs);
  if (s != NATS_OK) {
    if (sub != nullptr) natsSubscription_Destroy(sub);
    return MakeError("cannot listen on " + subject + ": " + StatusText(s));
  }
  handles_->listening[subject] = sub;
  return Status::Ok();
}

Result<std::optional<NatsStream::Heard>> NatsStream::Hear(const std::string& subject, int64_t timeout_ms) {
  auto it = handles_->listening.find(subject);
  if (it == handles_->listening.end()) return MakeError("not listening on " + subject);
  natsMsg* message = nullptr;
  natsStatus s = natsSubscription_NextMsg(&message, it->second, std::max<int64_t>(timeout_ms, 1));
  if (s == NATS_TIMEOUT) return std::optional<Heard>();
  if (s != NATS_OK) return MakeError("listening on " + subject + ": " + StatusText(s));
  Heard heard;
  heard.text.assign(natsMsg_GetData(message) ? natsMsg_GetData(message) : "", natsMsg_GetDataLength(message));
  if (const char* reply = natsMsg_GetReply(message); reply != nullptr) heard.reply = reply;
  natsMsg_Destroy(message);
  return std::optional<Heard>(std::move(heard));
}

bool NatsStream::Connected() const {
  return handles_ && handles_->connection != nullptr &&
         natsConnection_Status(handles_->connection) == NATS_CONN_STATUS_CONNECTED;
}

}  // namespace trellara::cli::broker
