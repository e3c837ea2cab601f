// object_store.cpp — the lake's object stores (object_store.h): a directory (atomic create +
// fsync) and S3-compatible HTTP (libcurl, path-style URLs, SigV4 from core). Never deletes and never
// overwrites an object with other content.
#include "lake/object_store.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "kit/errors.h"
#include "lake/fanin.h"
#include "trellara/lake/sigv4.h"

namespace trellara::cli::lake {
// Named, not anonymous: the applier compiles as unity batches (CMakeLists.txt).
namespace object_store {

constexpr int kS3AttemptsMax = 4;              // a connection failure or a 5xx, tried again
constexpr int kS3RetryBackoffMs = 250;         // times the attempt number
constexpr long kS3ConnectTimeoutMs = 5000;
constexpr long kS3RequestTimeoutMs = 120000;   // one request, the body included
constexpr size_t kS3ErrorBodyShownMax = 300;   // of a failed answer's body, in the error

bool SameBytes(const std::string& held, std::span<const uint8_t> bytes) {
  return held.size() == bytes.size() && std::memcmp(held.data(), bytes.data(), bytes.size()) == 0;
}

// ---- a directory -----------------------------------------------------------------------------

class FilesystemObjectStore final : public ObjectStore {
 public:
  // The root as configured (a trailing '/' kept): locations stay the strings lakes written before
  // object stores existed hold.
  explicit FilesystemObjectStore(std::string root) : root_(std::move(root)) {}

  bool PutOnce(const std::string& key, std::span<const uint8_t> bytes) override {
    namespace fs = std::filesystem;
    const std::string path = Location(key);
    std::error_code ec;
    fs::create_directories(fs::path(path).parent_path(), ec);
    if (ec) throw CommandFailed("cannot create the directory of " + path + ": " + ec.message());
    if (auto held = Get(key)) {
      if (SameBytes(*held, bytes)) return true;
      throw CommandFailed("the lake file " + path + " exists with other content than this publication writes; it was "
                          "changed outside the fan-in: move it away (never delete a file the catalog may reference) "
                          "and run again");
    }
    const std::string tmp = path + ".tmp." + std::to_string(getpid());
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw CommandFailed("cannot create " + tmp + ": " + std::strerror(errno));
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int err = errno;
        ::close(fd);
        throw CommandFailed("cannot write " + tmp + ": " + std::strerror(err));
      }
      done += static_cast<size_t>(n);
    }
    if (::fdatasync(fd) != 0) {
      const int err = errno;
      ::close(fd);
      throw CommandFailed("cannot fsync " + tmp + ": " + std::strerror(err));
    }
    if (::close(fd) != 0) throw CommandFailed("cannot close " + tmp + ": " + std::strerror(errno));
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      throw CommandFailed("cannot rename " + tmp + " to " + path + ": " + std::strerror(errno));
    const int dir = ::open(fs::path(path).parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) throw CommandFailed("cannot open the directory of " + path + " to fsync it: " + std::strerror(errno));
    const int synced = ::fsync(dir);
    const int err = errno;
    ::close(dir);
    if (synced != 0) throw CommandFailed("cannot fsync the directory of " + path + ": " + std::strerror(err));
    return false;
  }

  std::optional<std::string> Get(const std::string& key) override {
    const std::string path = Location(key);
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      if (!std::filesystem::exists(path)) return std::nullopt;
      throw CommandFailed("cannot read the lake file " + path + ": " + std::strerror(errno));
    }
    std::string held((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) throw CommandFailed("cannot read the lake file " + path);
    return held;
  }

  bool Exists(const std::string& key) override { return std::filesystem::exists(Location(key)); }

  std::string Location(const std::string& key) const override { return root_ + "/" + key; }

 private:
  std::string root_;
};

// ---- S3-compatible HTTP ------------------------------------------------------------------------

size_t CollectBody(char* data, size_t size, size_t count, void* out) {
  static_cast<std::string*>(out)->append(data, size * count);
  return size * count;
}

std::string Base64Md5(std::span<const uint8_t> bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &len, EVP_md5(), nullptr);
  unsigned char out[64];
  const int n = EVP_EncodeBlock(out, digest, static_cast<int>(len));
  return std::string(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
}

// "<Code>SignatureDoesNotMatch</Code>" of an S3 error body, or "".
std::string S3ErrorCode(const std::string& body) {
  const size_t open = body.find("<Code>");
  const size_t close = body.find("</Code>");
  if (open == std::string::npos || close == std::string::npos || close < open) return "";
  return body.substr(open + 6, close - open - 6);
}

struct HttpAnswer {
  long status = 0;      // 0: no answer (curl_error says why)
  std::string body;
  std::string curl_error;
};

class S3ObjectStore final : public ObjectStore {
 public:
  explicit S3ObjectStore(const LakeS3Config& s3) : s3_(s3) {
    static std::once_flag curl_once;
    std::call_once(curl_once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
    curl_ = curl_easy_init();
    if (curl_ == nullptr) throw CommandFailed("cannot start libcurl for the S3 endpoint " + s3_.endpoint);
    std::string rest = s3_.endpoint.substr(s3_.endpoint.find("://") + 3);
    host_ = rest.substr(0, rest.find('/'));
  }
  ~S3ObjectStore() override { curl_easy_cleanup(curl_); }
  S3ObjectStore(const S3ObjectStore&) = delete;
  S3ObjectStore& operator=(const S3ObjectStore&) = delete;

  bool PutOnce(const std::string& key, std::span<const uint8_t> bytes) override {
    // Not every S3-compatible server honours If-None-Match on PUT: read what is there first. The
    // fan-in is the lake's only writer and keys name content, so nothing races in between.
    if (auto held = Get(key)) {
      if (SameBytes(*held, bytes)) return true;
      throw CommandFailed("the lake object " + Location(key) + " (S3 endpoint " + s3_.endpoint + ", bucket " + s3_.bucket +
                          ", key " + ObjectKey(key) + ") exists with other content than this publication writes; it "
                          "was changed outside the fan-in: copy it away (never delete an object the catalog may "
                          "reference) and run again");
    }
    const HttpAnswer a = Request("PUT", key, bytes);
    if (a.status != 200) throw Failure("PUT", key, a);
    return false;
  }

  std::optional<std::string> Get(const std::string& key) override {
    HttpAnswer a = Request("GET", key, {});
    if (a.status == 404) return std::nullopt;
    if (a.status != 200) throw Failure("GET", key, a);
    return std::move(a.body);
  }

  bool Exists(const std::string& key) override {
    const HttpAnswer a = Request("HEAD", key, {});
    if (a.status == 404) return false;
    if (a.status != 200) throw Failure("HEAD", key, a);
    return true;
  }

  std::string Location(const std::string& key) const override { return "s3://" + s3_.bucket + "/" + ObjectKey(key); }

 private:
  std::string ObjectKey(const std::string& key) const { return s3_.prefix.empty() ? key : s3_.prefix + "/" + key; }

  CommandFailed Failure(const std::string& method, const std::string& key, const HttpAnswer& a) const {
    std::string what = method + " of bucket " + s3_.bucket + ", key " + ObjectKey(key) + " at the S3 endpoint " +
                       s3_.endpoint + " (region " + s3_.region + ")";
    if (a.status == 0) return CommandFailed(what + " got no answer: " + a.curl_error + "; start the server or correct "
                                            "[lake] s3_endpoint, then run again (nothing was committed for this epoch)");
    const std::string code = S3ErrorCode(a.body);
    what += " failed with HTTP status " + std::to_string(a.status) + (code.empty() ? "" : " " + code);
    if (a.status == 403 || a.status == 401)
      return CommandFailed(what + ": the server refused the credentials; check [lake] s3_access_key_id and "
                           "s3_secret_access_key (or the credentials file) and s3_region, then run again");
    if (code == "NoSuchBucket")
      return CommandFailed(what + ": create bucket " + s3_.bucket + " (the fan-in never creates one), then run again");
    std::string body = a.body.substr(0, kS3ErrorBodyShownMax);
    for (char& c : body)
      if (c == '\n' || c == '\r') c = ' ';
    return CommandFailed(what + (body.empty() ? "" : ": " + body) + "; run again once the server accepts requests");
  }

  HttpAnswer Request(const std::string& method, const std::string& key, std::span<const uint8_t> body) {
    HttpAnswer a;
    for (int attempt = 1; attempt <= kS3AttemptsMax; attempt++) {
      a = RequestOnce(method, key, body);
      if (a.status != 0 && a.status < 500) return a;
      if (attempt < kS3AttemptsMax) std::this_thread::sleep_for(std::chrono::milliseconds(kS3RetryBackoffMs * attempt));
    }
    return a;
  }

  HttpAnswer RequestOnce(const std::string& method, const std::string& key, std::span<const uint8_t> body) {
    const std::string path = trellara::lake::EncodeS3Path("/" + s3_.bucket + "/" + ObjectKey(key));
    trellara::lake::SigV4Request r;
    r.method = method;
    r.canonical_uri = path;
    r.host = host_;
    r.amz_date = trellara::lake::AmzDateOf(static_cast<int64_t>(std::time(nullptr)));
    const bool put = method == "PUT";
    r.payload_sha256 = trellara::lake::PayloadSha256Hex(put ? body : std::span<const uint8_t>());
    if (put) r.headers["content-md5"] = Base64Md5(body);
    trellara::lake::SigV4Credentials cred{s3_.access_key_id, s3_.secret_access_key, s3_.region, "s3"};
    auto signed_request = trellara::lake::SignV4(r, cred);
    if (!signed_request.ok())
      throw CommandFailed("cannot sign " + method + " of bucket " + s3_.bucket + ", key " + ObjectKey(key) + ": " +
                          signed_request.error().message);
    curl_slist* headers = nullptr;
    auto add = [&](const std::string& h) { headers = curl_slist_append(headers, h.c_str()); };
    add("Host: " + host_);
    add("x-amz-date: " + r.amz_date);
    add("x-amz-content-sha256: " + r.payload_sha256);
    add("Authorization: " + signed_request->authorization);
    if (put) {
      add("Content-MD5: " + r.headers["content-md5"]);
      add("Content-Type: application/octet-stream");
      add("Expect:");  // no 100-continue round trip
    }
    const std::string url = s3_.endpoint + path;
    HttpAnswer a;
    curl_easy_reset(curl_);
    curl_easy_setopt(curl_, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl_, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl_, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl_, CURLOPT_CONNECTTIMEOUT_MS, kS3ConnectTimeoutMs);
    curl_easy_setopt(curl_, CURLOPT_TIMEOUT_MS, kS3RequestTimeoutMs);
    curl_easy_setopt(curl_, CURLOPT_WRITEFUNCTION, CollectBody);
    curl_easy_setopt(curl_, CURLOPT_WRITEDATA, &a.body);
    if (method == "HEAD") {
      curl_easy_setopt(curl_, CURLOPT_NOBODY, 1L);
    } else if (put) {
      curl_easy_setopt(curl_, CURLOPT_CUSTOMREQUEST, "PUT");
      curl_easy_setopt(curl_, CURLOPT_POSTFIELDS, reinterpret_cast<const char*>(body.data()));
      curl_easy_setopt(curl_, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
    }
    char error[CURL_ERROR_SIZE] = {0};
    curl_easy_setopt(curl_, CURLOPT_ERRORBUFFER, error);
    const CURLcode rc = curl_easy_perform(curl_);
    curl_slist_free_all(headers);
    if (rc != CURLE_OK) {
      a.curl_error = error[0] ? error : curl_easy_strerror(rc);
      return a;
    }
    curl_easy_getinfo(curl_, CURLINFO_RESPONSE_CODE, &a.status);
    return a;
  }

  LakeS3Config s3_;
  std::string host_;
  CURL* curl_ = nullptr;
};

}  // namespace object_store

std::optional<std::string> ObjectStore::KeyOf(const std::string& location) const {
  const std::string root = Location("");
  if (location.size() <= root.size() || location.compare(0, root.size(), root) != 0) return std::nullopt;
  return location.substr(root.size());
}

std::unique_ptr<ObjectStore> OpenObjectStore(const LakeConfig& config) {
  if (config.s3) return std::make_unique<object_store::S3ObjectStore>(*config.s3);
  return std::make_unique<object_store::FilesystemObjectStore>(config.warehouse);
}

}  // namespace trellara::cli::lake
