// nats_stream.cpp — one flow's JetStream stream through libnats (nats_stream.h).
#include "broker/nats_stream.h"
#include "trellara/broker/replica_intake.h"

#include <nats/nats.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>

#include <nlohmann/json.hpp>

#include "trellara/broker/pull_credit.h"

namespace trellara::cli::broker {
namespace {

// Debian's nats-server keeps a stream's duplicate window as nanoseconds.
constexpr int64_t kDuplicateWindowNs = 120ll * 1000 * 1000 * 1000;
constexpr int64_t kConnectTimeoutMs = 2000;
constexpr int64_t kReconnectWaitMs = 250;
// A reader's pull consumer: how many messages one pull request asks for and its byte budget, how
// long the server keeps the consumer once nobody pulls (an applier that died leaves no consumer
// behind for long). Requests carry no expiry: core pull_credit.h says why.
constexpr int kPullBatch = 512;
constexpr int64_t kPullMaxBytes = 32ll << 20;  // at least a message's largest size (nats-server max_payload ≤ 32 MB here)
constexpr int64_t kConsumerInactiveNs = 60ll * 1000 * 1000 * 1000;
constexpr int64_t kDeleteConsumerWaitMs = 1000;

std::string StatusText(natsStatus status, jsErrCode code = static_cast<jsErrCode>(0)) {
  std::string text = natsStatus_GetText(status);
  const char* detail = nats_GetLastError(nullptr);
  if (detail != nullptr && *detail != '\0' && text.find(detail) == std::string::npos) text += std::string(": ") + detail;
  if (code != 0) text += " (JetStream error " + std::to_string(static_cast<int>(code)) + ")";
  return text;
}

}  // namespace

struct NatsStream::Handles {
  natsInbox* inbox = nullptr;               // PublishBatch's replies: <inbox>.<batch>.<index>
  natsSubscription* replies = nullptr;
  uint64_t batch = 0;
  natsOptions* options = nullptr;
  natsConnection* connection = nullptr;
  jsCtx* js = nullptr;
  // Reading (a remote applier): the stream's pull consumer, pulled by hand (not with
  // natsSubscription_Fetch, see StartReading): requests go to `next_subject` with replies to
  // <pull_inbox>.<request id>, all received by `reading`.
  natsSubscription* reading = nullptr;
  natsInbox* pull_inbox = nullptr;
  std::string consumer;                      // the consumer's name ("" when none)
  std::string next_subject;                  // $JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>
  // What the outstanding requests may still deliver (core pull_credit.h), and the id of the last.
  trellara::broker::PullCredit credit{kPullBatch};
  uint64_t request_id = 0;
  // Re-established connections (libnats' reconnected callback, its own thread): the server lost
  // the requests of the connection that went away, so they are asked again.
  std::atomic<uint64_t> reconnects{0};
  uint64_t reconnects_seen = 0;
  std::map<std::string, natsSubscription*> listening;
  // Subscriptions given up while the connection reads: unsubscribed, freed only once the
  // connection is closed. libnats 3.4.1 (Debian's) looks a subscription up in its read thread
  // without holding a reference, so freeing one the server may still send to (the pull request
  // of a consumer being replaced, acknowledgements still on their way) raced that thread and
  // corrupted the heap (fixed upstream after 3.4.1, nats.c 0a7dd28b).
  std::vector<natsSubscription*> retired;
  void Retire(natsSubscription*& sub) {
    if (sub == nullptr) return;
    natsSubscription_Unsubscribe(sub);  // the pull consumer is deleted now rather than left to expire
    retired.push_back(sub);
    sub = nullptr;
  }
  ~Handles() {
    // Subscriptions unsubscribed first, then the connection closed — its read thread joined —
    // and only then anything freed.
    Retire(reading);
    Retire(replies);
    for (auto& [subject, sub] : listening) Retire(sub);
    if (connection != nullptr) natsConnection_Close(connection);
    for (natsSubscription* sub : retired) natsSubscription_Destroy(sub);
    if (inbox != nullptr) natsInbox_Destroy(inbox);
    if (pull_inbox != nullptr) natsInbox_Destroy(pull_inbox);
    if (js != nullptr) jsCtx_Destroy(js);
    if (connection != nullptr) natsConnection_Destroy(connection);
    if (options != nullptr) natsOptions_Destroy(options);
  }
};

namespace {
bool g_client_used = false;  // a connection was made: the library's threads may run
}  // namespace

void CloseClientLibrary() {
  if (g_client_used) nats_CloseAndWait(2000);
}

Result<std::unique_ptr<NatsStream>> NatsStream::Open(const StreamSettings& settings, bool* misconfigured) {
  g_client_used = true;
  bool ignored = false;
  if (misconfigured == nullptr) misconfigured = &ignored;
  *misconfigured = false;
  if (settings.servers.empty()) return MakeError("no broker servers to connect to ([transport] servers)");
  std::unique_ptr<NatsStream> stream(new NatsStream(settings));
  TRELLARA_TRY(stream->Connect());
  TRELLARA_TRY(stream->EnsureStream(misconfigured));
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
  // Called on libnats' own thread; the handles outlive the connection (~Handles closes it first).
  if (s == NATS_OK)
    s = natsOptions_SetReconnectedCB(
        handles_->options,
        [](natsConnection*, void* closure) { static_cast<Handles*>(closure)->reconnects.fetch_add(1); },
        handles_.get());
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

Status NatsStream::EnsureStream(bool* misconfigured) {
  jsStreamInfo* info = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  natsStatus s = js_GetStreamInfo(&info, handles_->js, settings_.stream.c_str(), nullptr, &code);
  if (s == NATS_OK) {
    bool holds_subject = false;
    for (int i = 0; i < info->Config->SubjectsLen; i++)
      holds_subject |= settings_.stream_subjects == info->Config->Subjects[i];
    const int64_t replicas = info->Config->Replicas;
    jsStreamInfo_Destroy(info);
    *misconfigured = !holds_subject || replicas != settings_.replicas;
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
  *misconfigured = s != NATS_OK && (code == JSStreamSubjectOverlapErr || code == JSStreamInvalidConfig ||
                                    code == JSStreamReplicasNotSupportedErr);
  if (s != NATS_OK)
    return MakeError("cannot create stream " + settings_.stream + " (subjects " + settings_.stream_subjects + ", " +
                     std::to_string(settings_.replicas) + " replicas, file storage) on the broker: " +
                     StatusText(s, code));
  jsStreamInfo_Destroy(info);
  return Status::Ok();
}

Result<std::optional<NatsStream::Last>> NatsStream::LastRecord(const std::string& subject_or_default) {
  const std::string& subject = subject_or_default.empty() ? settings_.subject : subject_or_default;
  natsMsg* message = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  natsStatus s = js_GetLastMsg(&message, handles_->js, settings_.stream.c_str(), subject.c_str(), nullptr, &code);
  if (s == NATS_NOT_FOUND || code == JSNoMessageFoundErr) return std::optional<Last>();
  if (s != NATS_OK)
    return MakeError("cannot read the last record of " + subject + " in stream " + settings_.stream + ": " +
                     StatusText(s, code));
  const char* id = nullptr;
  natsStatus header = natsMsgHeader_Get(message, "Nats-Msg-Id", &id);
  Last last;
  last.sequence = natsMsg_GetSequence(message);
  if (header == NATS_OK && id != nullptr) last.message_id = id;
  for (auto [key, field] : {std::pair{"Trellara-Format", &last.format_header}, std::pair{"Trellara-Count", &last.count_header}}) {
    const char* value = nullptr;
    if (natsMsgHeader_Get(message, key, &value) == NATS_OK && value != nullptr) *field = std::string(value);
  }
  natsMsg_Destroy(message);
  if (last.message_id.empty())
    return MakeError("the last record of " + subject + " in stream " + settings_.stream + " (sequence " +
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

std::vector<NatsStream::Published> NatsStream::PublishBatch(const std::vector<OutRecord>& records,
                                                            std::optional<uint64_t> expected_last_sequence,
                                                            const std::string& subject) {
  std::vector<Published> out(records.size());
  auto fail_all = [&](PublishFailure kind, const std::string& message) {
    for (auto& p : out)
      if (!p.ack && !p.error) p.error = PublishError{kind, message};
    return out;
  };
  natsStatus s = NATS_OK;
  if (handles_->replies == nullptr) {
    s = natsInbox_Create(&handles_->inbox);
    if (s == NATS_OK)
      s = natsConnection_SubscribeSync(&handles_->replies, handles_->connection,
                                       (std::string(handles_->inbox) + ".>").c_str());
    if (s != NATS_OK) return fail_all(PublishFailure::Unavailable, "cannot listen for acknowledgements: " + StatusText(s));
  }
  const std::string prefix = std::string(handles_->inbox) + "." + std::to_string(++handles_->batch) + ".";
  for (size_t i = 0; i < records.size(); i++) {
    const OutRecord& r = records[i];
    natsMsg* message = nullptr;
    s = natsMsg_Create(&message, subject.empty() ? settings_.subject.c_str() : subject.c_str(),
                       (prefix + std::to_string(i)).c_str(),
                       reinterpret_cast<const char*>(r.payload.data()), static_cast<int>(r.payload.size()));
    if (s == NATS_OK) s = natsMsgHeader_Set(message, "Nats-Msg-Id", r.message_id.c_str());
    if (s == NATS_OK && i == 0 && expected_last_sequence)
      s = natsMsgHeader_Set(message, "Nats-Expected-Last-Subject-Sequence",
                            std::to_string(*expected_last_sequence).c_str());
    for (const auto& [key, value] : r.headers)
      if (s == NATS_OK) s = natsMsgHeader_Set(message, key.c_str(), value.c_str());
    if (s == NATS_OK) s = natsConnection_PublishMsg(handles_->connection, message);
    if (message != nullptr) natsMsg_Destroy(message);
    if (s != NATS_OK) return fail_all(PublishFailure::Unavailable, "cannot publish: " + StatusText(s));
  }
  s = natsConnection_FlushTimeout(handles_->connection, settings_.publish_wait_ms);
  if (s != NATS_OK) return fail_all(PublishFailure::Unavailable, "cannot publish: " + StatusText(s));
  size_t answered = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(settings_.publish_wait_ms);
  while (answered < records.size()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    natsMsg* reply = nullptr;
    s = natsSubscription_NextMsg(&reply, handles_->replies, left.count());
    if (s == NATS_TIMEOUT) break;
    if (s != NATS_OK) {
      // The replies' subscription is not trusted after an error (a reconnect, a slow consumer):
      // the next batch listens on a new one.
      const std::string why = "waiting for acknowledgements (status " + std::to_string(static_cast<int>(s)) +
                              "): " + StatusText(s);
      handles_->Retire(handles_->replies);
      natsInbox_Destroy(handles_->inbox);
      handles_->inbox = nullptr;
      return fail_all(PublishFailure::Unavailable, why);
    }
    const std::string reply_to = natsMsg_GetSubject(reply);
    std::string data(natsMsg_GetData(reply) ? natsMsg_GetData(reply) : "", natsMsg_GetDataLength(reply));
    const char* status = nullptr;
    const bool no_responders = natsMsgHeader_Get(reply, "Status", &status) == NATS_OK && status != nullptr &&
                               std::string(status) == "503";
    natsMsg_Destroy(reply);
    if (reply_to.rfind(prefix, 0) != 0) continue;  // an earlier batch's late answer
    size_t index = 0;
    try {
      index = std::stoul(reply_to.substr(prefix.size()));
    } catch (const std::exception&) {
      continue;
    }
    if (index >= out.size() || out[index].ack || out[index].error) continue;
    answered++;
    if (no_responders) {
      out[index].error = PublishError{PublishFailure::Unavailable, "no responders: the stream has no leader"};
      continue;
    }
    auto j = nlohmann::json::parse(data, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      out[index].error = PublishError{PublishFailure::Unavailable, "unreadable acknowledgement: " + data};
    } else if (j.contains("error")) {
      const int code = j["error"].value("err_code", 0);
      PublishError e{PublishFailure::Unavailable, j["error"].value("description", data) + " (JetStream error " +
                                                      std::to_string(code) + ")"};
      if (code == JSStreamWrongLastSequenceErr) e.kind = PublishFailure::WrongLast;
      else if (code == JSStreamNotFoundErr || code == JSStreamNotMatchErr) e.kind = PublishFailure::Refused;
      out[index].error = e;
    } else {
      out[index].ack = PublishAck{j.value("seq", uint64_t{0}), j.value("duplicate", false)};
    }
  }
  return fail_all(PublishFailure::Unavailable, "no acknowledgement within " + std::to_string(settings_.publish_wait_ms) +
                                                   " ms (no quorum, or the broker cannot be reached)");
}

Status NatsStream::StartReading(uint64_t from_sequence) {
  // The consumer is pulled by hand rather than with natsSubscription_Fetch: libnats 3.4.1
  // (Debian 12's) overruns the array Fetch returns when messages of an earlier pull request are
  // still pending as a fetch starts (more than half its batch) — heap corruption seen in the
  // remote applier under a refill (fixed upstream in nats.c 8099b5c9, 2024).
  StopReading();
  jsConsumerConfig config;
  jsConsumerConfig_Init(&config);
  config.AckPolicy = js_AckNone;  // the reader decides itself what it holds
  config.DeliverPolicy = js_DeliverByStartSequence;
  config.OptStartSeq = std::max<uint64_t>(from_sequence, 1);
  config.FilterSubject = settings_.stream_subjects.c_str();
  config.InactiveThreshold = kConsumerInactiveNs;
  // One replica, in memory: the consumer's state (where it delivered up to) is never evidence —
  // the replica's own durable end is, and a consumer lost with its node is simply created again
  // (Read fails, or Probe finds the stream ahead of what was delivered). An R3 file-backed
  // consumer would have the broker replicate and write that state for every pull.
  config.Replicas = 1;
  config.MemoryStorage = true;
  jsConsumerInfo* info = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  natsStatus s = js_AddConsumer(&info, handles_->js, settings_.stream.c_str(), &config, nullptr, &code);
  if (s != NATS_OK || info == nullptr || info->Name == nullptr) {
    if (info != nullptr) jsConsumerInfo_Destroy(info);
    return MakeError("cannot read stream " + settings_.stream + " from sequence " + std::to_string(from_sequence) +
                     ": " + StatusText(s, code));
  }
  handles_->consumer = info->Name;
  jsConsumerInfo_Destroy(info);
  handles_->next_subject = "$JS.API.CONSUMER.MSG.NEXT." + settings_.stream + "." + handles_->consumer;
  s = natsInbox_Create(&handles_->pull_inbox);
  if (s == NATS_OK)
    s = natsConnection_SubscribeSync(&handles_->reading, handles_->connection,
                                     (std::string(handles_->pull_inbox) + ".*").c_str());
  // What is pending is bounded by the requests (kPullMaxBytes each, a request asked only when the
  // others may carry half a batch at most), not by the library's default limits, which would drop
  // messages as a slow consumer.
  if (s == NATS_OK) s = natsSubscription_SetPendingLimits(handles_->reading, -1, -1);
  if (s != NATS_OK) {
    const std::string why = StatusText(s);
    StopReading();
    return MakeError("cannot read stream " + settings_.stream + ": cannot listen for its messages: " + why);
  }
  return Status::Ok();
}

void NatsStream::StopReading() {
  handles_->Retire(handles_->reading);
  if (handles_->pull_inbox != nullptr) natsInbox_Destroy(handles_->pull_inbox);
  handles_->pull_inbox = nullptr;
  // A new consumer: none of its requests yet (the old ones answered on the inbox just retired).
  handles_->credit = trellara::broker::PullCredit(kPullBatch);
  handles_->request_id = 0;
  if (!handles_->consumer.empty()) {
    // Best effort: a consumer nobody pulls from expires on its own (kConsumerInactiveNs).
    jsOptions options;
    jsOptions_Init(&options);
    options.Wait = kDeleteConsumerWaitMs;
    jsErrCode code = static_cast<jsErrCode>(0);
    js_DeleteConsumer(handles_->js, settings_.stream.c_str(), handles_->consumer.c_str(), &options, &code);
    handles_->consumer.clear();
  }
}

Status NatsStream::TopUpPullRequests() {
  auto& credit = handles_->credit;
  // The connection was re-established: the server dropped the requests of the old one (it found
  // nobody listening), and says nothing of it. Asked again rather than left for the idle probe.
  if (const uint64_t reconnects = handles_->reconnects.load(); reconnects != handles_->reconnects_seen) {
    handles_->reconnects_seen = reconnects;
    credit.Forget();
  }
  // Another request whenever the open ones may carry half a batch at most: the server always has
  // a request to send into. No expiry (core pull_credit.h).
  while (credit.ShouldAsk()) {
    const uint64_t id = ++handles_->request_id;
    const std::string reply = std::string(handles_->pull_inbox) + "." + std::to_string(id);
    const std::string body =
        "{\"batch\":" + std::to_string(kPullBatch) + ",\"max_bytes\":" + std::to_string(kPullMaxBytes) + "}";
    natsStatus s = natsConnection_PublishRequest(handles_->connection, handles_->next_subject.c_str(), reply.c_str(),
                                                 body.data(), static_cast<int>(body.size()));
    if (s != NATS_OK) return MakeError("cannot ask stream " + settings_.stream + " for messages: " + StatusText(s));
    credit.Asked(id);
  }
  return Status::Ok();
}

Result<uint64_t> NatsStream::LastSequence() {
  jsStreamInfo* info = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  natsStatus s = js_GetStreamInfo(&info, handles_->js, settings_.stream.c_str(), nullptr, &code);
  if (s != NATS_OK) return MakeError("cannot read stream " + settings_.stream + ": " + StatusText(s, code));
  const uint64_t last = info->State.LastSeq;
  // A leader that answers is not a quorum: it may not have noticed yet that its peers are gone.
  // A majority of the replicas must be current (the leader counts as one).
  int current = 0;
  std::string leader;
  if (info->Cluster != nullptr) {
    if (info->Cluster->Leader != nullptr) leader = info->Cluster->Leader;
    current = leader.empty() ? 0 : 1;
    for (int i = 0; i < info->Cluster->ReplicasLen; i++) {
      const jsPeerInfo* peer = info->Cluster->Replicas[i];
      if (peer != nullptr && peer->Current && !peer->Offline) current++;
    }
  }
  jsStreamInfo_Destroy(info);
  if (current < settings_.replicas / 2 + 1)
    return MakeError("stream " + settings_.stream + " has no quorum: " + std::to_string(current) + " of " +
                     std::to_string(settings_.replicas) + " replicas current" +
                     (leader.empty() ? ", no leader" : " (leader " + leader + ")"));
  return last;
}

Result<std::optional<NatsStream::Delivered>> NatsStream::Read(int64_t timeout_ms) {
  if (handles_->reading == nullptr) return MakeError("stream " + settings_.stream + " is not being read");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max<int64_t>(timeout_ms, 1));
  natsMsg* message = nullptr;
  for (;;) {
    TRELLARA_TRY(TopUpPullRequests());
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    natsStatus s = natsSubscription_NextMsg(&message, handles_->reading, std::max<int64_t>(left, 1));
    if (s == NATS_TIMEOUT) return std::optional<Delivered>();
    if (s == NATS_NO_RESPONDERS)
      return MakeError("reading stream " + settings_.stream + ": consumer " + handles_->consumer +
                       " does not answer (no responders: the stream has no leader, or the consumer is gone)");
    if (s != NATS_OK) return MakeError("reading stream " + settings_.stream + ": " + StatusText(s));
    const char* status = nullptr;
    if (natsMsg_GetDataLength(message) == 0 && natsMsgHeader_Get(message, "Status", &status) == NATS_OK &&
        status != nullptr) {
      // A status of a pull request, on that request's own reply subject <pull_inbox>.<id>.
      trellara::broker::PullStatus pull;
      pull.code = status;
      auto header = [&](const char* key) -> std::string {
        const char* value = nullptr;
        return natsMsgHeader_Get(message, key, &value) == NATS_OK && value != nullptr ? value : "";
      };
      auto count = [](const std::string& text) -> std::optional<int64_t> {
        if (text.empty() || text.size() > 18 || text.find_first_not_of("0123456789") != std::string::npos)
          return std::nullopt;
        return std::stoll(text);
      };
      pull.description = header("Description");
      pull.pending_messages = count(header("Nats-Pending-Messages"));
      pull.pending_bytes = count(header("Nats-Pending-Bytes"));
      const std::string subject = natsMsg_GetSubject(message);
      natsMsg_Destroy(message);
      message = nullptr;
      const auto id = count(subject.substr(subject.rfind('.') + 1));
      const auto meaning = trellara::broker::InterpretPullStatus(pull, kPullBatch, kPullMaxBytes);
      switch (meaning.kind) {
        case trellara::broker::PullStatusMeaning::Kind::Ignore:
          break;
        case trellara::broker::PullStatusMeaning::Kind::Ended:
          // An id not of this consumer's requests (voided, or not a number) counts nothing.
          if (id) handles_->credit.Ended(static_cast<uint64_t>(*id), meaning.pending);
          break;
        case trellara::broker::PullStatusMeaning::Kind::AllEnded:
          handles_->credit.Forget();
          break;
        case trellara::broker::PullStatusMeaning::Kind::Fatal:
          return MakeError("reading stream " + settings_.stream + ": consumer " + handles_->consumer + " " +
                           meaning.message + " (pull request " + subject + ")");
      }
      continue;  // asked again by TopUpPullRequests as the credit says
    }
    handles_->credit.Delivered();
    break;
  }
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
  d.offset_header = header("Trellara-Offset");
  d.format_header = header("Trellara-Format");
  d.count_header = header("Trellara-Count");
  d.offset = number(d.offset_header);
  if (auto type = number(header("Trellara-Type")); type && *type <= 255) d.type = static_cast<uint8_t>(*type);
  d.commit_lsn = header("Trellara-Commit-Lsn").value_or("");
  d.timeline_header = header(trellara::broker::kTimelineHeader);
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
    handles_->Retire(sub);
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
