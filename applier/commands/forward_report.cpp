// forward_report.cpp — what the forwarder says (forward_internal.h): events and progress lines on
// stderr, its state file for `trellara status`, the metrics it publishes, and the summary at its end.
// Never changes what the forwarder does.
#include "commands/forward_internal.h"

namespace trellara::cli::forward {

void Forwarder::PublishMetrics(bool force) {
  if (!metrics_ || (!force && Clock::now() - last_metrics_ < std::chrono::milliseconds(500))) return;
  last_metrics_ = Clock::now();
  metrics::ForwardSnapshot s;
  s.flow = config_.flow_name;
  s.stream = config_.transport.stream;
  s.quorum_available = stream_ && !unavailable_;
  s.stopped = stopped_;
  s.published = counters_.published;
  s.already_held = counters_.already_held;
  s.publish_retries = counters_.publish_retries;
  s.resyncs = counters_.resyncs;
  s.refills = counters_.refills;
  s.refilled_records = counters_.refilled_records;
  s.positions = counters_.positions;
  s.next_offset = acked_end_;
  s.acks = counters_.published + counters_.already_held + counters_.refilled_records;
  s.ack_latency_seconds_sum = static_cast<double>(counters_.ack_latency_us_sum) / 1e6;
  s.ack_latency_seconds_max = static_cast<double>(counters_.ack_latency_us_max) / 1e6;
  snapshot_.Set(s);
}

void Forwarder::Event(const std::string& event, const std::string& fields) {
  if (event == "retry") unavailable_ = true;
  if (event == "resumed") unavailable_ = false;  // the stream answered
  if (event == "retry" || event == "resumed") SayState(unavailable_ ? "broker_quorum_unavailable" : "running", fields);
  if (event == "retry" || event == "resumed") PublishMetrics(true);
  std::cerr << "forward flow=" << config_.flow_name << " event=" << event << " " << fields << std::endl;
}

void Forwarder::PrintLine(const std::string& state) {
  std::cerr << "forward flow=" << config_.flow_name << " state=" << state << " next_offset="
            << acked_end_ << " published=" << counters_.published
            << " already_held=" << counters_.already_held << " publish_retries=" << counters_.publish_retries
            << std::endl;
}

void Forwarder::SayState(const std::string& state, const std::string& detail) {
  if (state == said_state_) return;
  said_state_ = state;
  broker::WriteBrokerState(config_.log_directory, broker::kForwarderStateFile, "trellara forward", state,
                           state == "broker_quorum_unavailable" ? detail : "");
}

void Forwarder::Finish(const std::string& state) {
  stopped_ = true;
  SayState("stopped", "");
  PublishMetrics(true);
  const uint64_t acked = counters_.published + counters_.already_held;
  const double mean_ms = acked ? static_cast<double>(counters_.ack_latency_us_sum) / acked / 1000.0 : 0.0;
  if (options_.format == OutputFormat::Json) {
    nlohmann::json j{{"flow", config_.flow_name},
                     {"state", state},
                     {"stream", config_.transport.stream},
                     {"log_identity", identity_},
                     {"next_offset", acked_end_},
                     {"published", counters_.published},
                     {"already_held", counters_.already_held},
                     {"publish_retries", counters_.publish_retries},
                     {"resyncs", counters_.resyncs},
                     {"refills", counters_.refills},
                     {"refilled_records", counters_.refilled_records},
                     {"positions", counters_.positions},
                     {"ack_latency_ms_mean", mean_ms},
                     {"ack_latency_ms_max", counters_.ack_latency_us_max / 1000.0}};
    std::cout << j.dump() << "\n";
  } else {
    std::cout << "forward: flow " << config_.flow_name << " " << state << " at offset "
              << acked_end_ << " of stream " << config_.transport.stream << ": "
              << counters_.published << " published, " << counters_.already_held << " already held, "
              << counters_.publish_retries << " publish retries, ack latency mean " << mean_ms << " ms\n";
  }
}

}  // namespace trellara::cli::forward
