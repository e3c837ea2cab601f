// sigv4.h — AWS Signature Version 4 of an S3 request (header-based authentication), as pure
// functions: the canonical request, the string to sign, the signing key and the Authorization
// header. The object store adapter (applier/lake/object_store.cpp) builds the request, asks for its
// headers here and sends it; nothing here opens a connection, reads a clock or a credentials file.
//
// The rules (AWS "Authenticating Requests: Using the Authorization Header", S3):
//   - Path-style requests: the canonical URI is "/<bucket>/<key>", every path segment URI-encoded
//     (unreserved characters A-Z a-z 0-9 - . _ ~ kept, '/' kept between segments, everything else
//     %XX with upper-case hex), encoded once (S3 does not double-encode).
//   - Every signed header name is lower-cased, its value trimmed (inner runs of spaces folded to
//     one); headers are sorted by name; host, x-amz-date and x-amz-content-sha256 are always signed.
//   - x-amz-content-sha256 is the hex SHA-256 of the payload, or UNSIGNED-PAYLOAD.
//   - The signing key is HMAC-SHA256 chained over "AWS4"+secret, the date (YYYYMMDD), the region,
//     the service and "aws4_request"; the signature is its HMAC of the string to sign, in hex.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "trellara/base/result.h"

namespace trellara::lake {

inline constexpr std::string_view kUnsignedPayload = "UNSIGNED-PAYLOAD";
inline constexpr std::string_view kSigV4Algorithm = "AWS4-HMAC-SHA256";

struct SigV4Credentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string region = "us-east-1";
  std::string service = "s3";
};

struct SigV4Request {
  std::string method;          // GET, PUT, HEAD
  std::string canonical_uri;   // already encoded: EncodeS3Path("/bucket/key")
  std::string query;           // canonical query string ("" for none; name=value sorted, encoded)
  // Headers to sign besides the three always signed (host, x-amz-date, x-amz-content-sha256 are
  // taken from the fields below); names in any case.
  std::map<std::string, std::string> headers;
  std::string host;            // the Host header: "127.0.0.1:9000", "examplebucket.s3.amazonaws.com"
  std::string amz_date;        // ISO 8601 basic: 20130524T000000Z
  std::string payload_sha256;  // hex SHA-256 of the body, or kUnsignedPayload
};

struct SigV4Signed {
  std::string canonical_request;
  std::string string_to_sign;
  std::string signed_headers;  // "host;range;x-amz-content-sha256;x-amz-date"
  std::string signature;       // hex
  std::string authorization;   // the Authorization header's value
};

// URI-encodes a path for the canonical request: every byte but A-Za-z0-9-._~ and '/' as %XX.
std::string EncodeS3Path(std::string_view path);

// Hex SHA-256 of bytes (what x-amz-content-sha256 carries for a signed payload).
std::string PayloadSha256Hex(std::span<const uint8_t> bytes);

// The x-amz-date of a Unix time in seconds (UTC): 20130524T000000Z.
std::string AmzDateOf(int64_t unix_seconds);

// Signs `request` with `credentials`. An error names what is missing or malformed (no host, an
// amz_date that is not 16 characters, no payload hash, no key, a header name that is empty or has
// a character a header name cannot hold).
Result<SigV4Signed> SignV4(const SigV4Request& request, const SigV4Credentials& credentials);

}  // namespace trellara::lake
