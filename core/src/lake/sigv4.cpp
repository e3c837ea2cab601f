// sigv4.cpp — AWS Signature Version 4 of S3 requests (sigv4.h). Pure: OpenSSL's SHA-256 and
// HMAC-SHA256 over strings; no clock, no network, no credentials file.
#include "trellara/lake/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <ctime>

namespace trellara::lake {
namespace {

using Digest = std::array<uint8_t, SHA256_DIGEST_LENGTH>;

std::string Hex(const uint8_t* data, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(n * 2, '0');
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = kDigits[data[i] >> 4];
    out[2 * i + 1] = kDigits[data[i] & 0xF];
  }
  return out;
}

std::string Sha256Hex(const void* data, size_t n) {
  Digest d{};
  SHA256(static_cast<const unsigned char*>(data), n, d.data());
  return Hex(d.data(), d.size());
}

Digest Hmac(const void* key, size_t key_len, std::string_view message) {
  Digest d{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), key, static_cast<int>(key_len), reinterpret_cast<const unsigned char*>(message.data()),
       message.size(), d.data(), &len);
  return d;
}

// A header value as signed: leading/trailing spaces removed, inner runs folded to one space.
std::string TrimHeaderValue(std::string_view v) {
  std::string out;
  bool space = false;
  for (char c : v) {
    if (c == ' ' || c == '\t') {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

bool IsHeaderNameChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
}

}  // namespace

std::string EncodeS3Path(std::string_view path) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(path.size());
  for (char ch : path) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' || c == '/') {
      out += ch;
    } else {
      out += '%';
      out += kDigits[c >> 4];
      out += kDigits[c & 0xF];
    }
  }
  return out;
}

std::string PayloadSha256Hex(std::span<const uint8_t> bytes) { return Sha256Hex(bytes.data(), bytes.size()); }

std::string AmzDateOf(int64_t unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[17];
  std::strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

Result<SigV4Signed> SignV4(const SigV4Request& request, const SigV4Credentials& credentials) {
  if (request.host.empty()) return MakeError("SigV4: the request has no host");
  if (request.amz_date.size() != 16 || request.amz_date[8] != 'T' || request.amz_date[15] != 'Z')
    return MakeError("SigV4: x-amz-date \"" + request.amz_date + "\" is not YYYYMMDDTHHMMSSZ");
  if (request.payload_sha256.empty()) return MakeError("SigV4: the request has no x-amz-content-sha256");
  if (request.method.empty() || request.canonical_uri.empty() || request.canonical_uri.front() != '/')
    return MakeError("SigV4: the request needs a method and a canonical URI starting with '/'");
  if (credentials.access_key_id.empty() || credentials.secret_access_key.empty())
    return MakeError("SigV4: the access key id or the secret access key is empty");
  if (credentials.region.empty() || credentials.service.empty()) return MakeError("SigV4: the region or service is empty");

  std::map<std::string, std::string> headers;  // lower-case name -> trimmed value, sorted by name
  for (const auto& [name, value] : request.headers) {
    if (name.empty() || !std::all_of(name.begin(), name.end(), IsHeaderNameChar))
      return MakeError("SigV4: \"" + name + "\" is not a header name");
    std::string lower = name;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
    headers[lower] = TrimHeaderValue(value);
  }
  headers["host"] = request.host;
  headers["x-amz-date"] = request.amz_date;
  headers["x-amz-content-sha256"] = request.payload_sha256;

  SigV4Signed out;
  std::string canonical_headers;
  for (const auto& [name, value] : headers) {
    canonical_headers += name + ":" + value + "\n";
    out.signed_headers += (out.signed_headers.empty() ? "" : ";") + name;
  }
  out.canonical_request = request.method + "\n" + request.canonical_uri + "\n" + request.query + "\n" +
                          canonical_headers + "\n" + out.signed_headers + "\n" + request.payload_sha256;
  const std::string date = request.amz_date.substr(0, 8);
  const std::string scope = date + "/" + credentials.region + "/" + credentials.service + "/aws4_request";
  out.string_to_sign = std::string(kSigV4Algorithm) + "\n" + request.amz_date + "\n" + scope + "\n" +
                       Sha256Hex(out.canonical_request.data(), out.canonical_request.size());
  const std::string secret = "AWS4" + credentials.secret_access_key;
  Digest key = Hmac(secret.data(), secret.size(), date);
  key = Hmac(key.data(), key.size(), credentials.region);
  key = Hmac(key.data(), key.size(), credentials.service);
  key = Hmac(key.data(), key.size(), "aws4_request");
  const Digest signature = Hmac(key.data(), key.size(), out.string_to_sign);
  out.signature = Hex(signature.data(), signature.size());
  out.authorization = std::string(kSigV4Algorithm) + " Credential=" + credentials.access_key_id + "/" + scope +
                      ",SignedHeaders=" + out.signed_headers + ",Signature=" + out.signature;
  return out;
}

}  // namespace trellara::lake
