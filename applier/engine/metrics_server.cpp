// metrics_server.cpp — `GET /metrics` over libmicrohttpd (metrics_server.h). One internal polling
// thread owned by libmicrohttpd; the only state it shares with the apply loop is snapshot_, under
// mutex_.
#include "engine/metrics_server.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "kit/errors.h"

namespace trellara::cli::apply {
namespace {

MHD_Result Reply(MHD_Connection* connection, unsigned int status, const std::string& body, const char* content_type) {
  MHD_Response* response =
      MHD_create_response_from_buffer(body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return MHD_NO;
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
  const MHD_Result queued = MHD_queue_response(connection, status, response);
  MHD_destroy_response(response);
  return queued;
}

MHD_Result Answer(void* cls, MHD_Connection* connection, const char* url, const char* method, const char*,
                  const char*, size_t* upload_data_size, void**) {
  auto* server = static_cast<MetricsServer*>(cls);
  if (std::strcmp(method, MHD_HTTP_METHOD_GET) != 0 && std::strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
    if (*upload_data_size != 0) {  // a body is not read: refuse at once
      *upload_data_size = 0;
    }
    return Reply(connection, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET /metrics and GET /readyz are served\n",
                 "text/plain; charset=utf-8");
  }
  if (std::strcmp(url, "/readyz") == 0) {
    const metrics::Readiness ready = server->Readiness();
    return Reply(connection, ready.ready ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE, ready.reason + "\n",
                 "text/plain; charset=utf-8");
  }
  if (std::strcmp(url, "/metrics") != 0)
    return Reply(connection, MHD_HTTP_NOT_FOUND, "not found: this endpoint serves GET /metrics and GET /readyz\n",
                 "text/plain; charset=utf-8");
  auto body = server->RenderMetrics();
  if (!body)
    return Reply(connection, MHD_HTTP_INTERNAL_SERVER_ERROR, "cannot render the metrics: " + body.error().message + "\n",
                 "text/plain; charset=utf-8");
  return Reply(connection, MHD_HTTP_OK, *body, metrics::kExpositionContentType);
}

}  // namespace

MetricsServer::MetricsServer(const metrics::ListenAddress& address, const std::string& config_path, Render metrics,
                             Ready ready)
    : render_(std::move(metrics)), ready_(std::move(ready)) {
  sockaddr_storage storage{};
  unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
  if (address.kind == metrics::ListenAddress::Kind::kIpv6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&storage);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(address.port);
    inet_pton(AF_INET6, address.host.c_str(), &a->sin6_addr);
    flags |= MHD_USE_IPv6;
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&storage);
    a->sin_family = AF_INET;
    a->sin_port = htons(address.port);
    inet_pton(AF_INET, address.host.c_str(), &a->sin_addr);
  }
  errno = 0;
  daemon_ = MHD_start_daemon(flags, address.port, nullptr, nullptr, &Answer, this, MHD_OPTION_SOCK_ADDR,
                             reinterpret_cast<sockaddr*>(&storage), MHD_OPTION_CONNECTION_LIMIT, 16u,
                             MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_END);
  if (daemon_ == nullptr) {
    const int error = errno;
    const std::string where = address.kind == metrics::ListenAddress::Kind::kIpv6
                                  ? "[" + address.host + "]:" + std::to_string(address.port)
                                  : address.host + ":" + std::to_string(address.port);
    throw CommandFailed("cannot serve metrics on " + where + " (metrics.listen in " + config_path + ")" +
                            (error != 0 ? std::string(": ") + std::strerror(error) : std::string()) +
                            "; nothing was done. Choose a free local address and port for metrics.listen, or "
                            "remove the [metrics] table",
                        1);
  }
}

MetricsServer::~MetricsServer() {
  if (daemon_ != nullptr) MHD_stop_daemon(daemon_);
}

}  // namespace trellara::cli::apply
