// lake_sigv4_test.cpp — AWS Signature Version 4 of S3 requests (core/include/trellara/lake/sigv4.h)
// against the examples AWS publishes in "Authenticating Requests: Using the Authorization Header
// (AWS Signature Version 4)", section "Examples: Signature Calculations" (Amazon S3 API Reference):
// the same credentials, date, requests, canonical requests, strings to sign and signatures.
#include <catch2/catch.hpp>

#include "trellara/lake/sigv4.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_lake_sigv4_test {

using namespace trellara::lake;

namespace {

constexpr const char* kEmptySha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

SigV4Credentials ExampleCredentials() {
  return SigV4Credentials{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "us-east-1", "s3"};
}

SigV4Request ExampleRequest(const std::string& method, const std::string& uri, const std::string& payload_sha256) {
  SigV4Request r;
  r.method = method;
  r.canonical_uri = uri;
  r.host = "examplebucket.s3.amazonaws.com";
  r.amz_date = "20130524T000000Z";
  r.payload_sha256 = payload_sha256;
  return r;
}

}  // namespace

TEST_CASE("sigv4_get_object_matches_the_documented_s3_example", "[lake]") {
  SigV4Request r = ExampleRequest("GET", EncodeS3Path("/test.txt"), kEmptySha256);
  r.headers["Range"] = "bytes=0-9";
  auto s = SignV4(r, ExampleCredentials());
  REQUIRE(s.ok());
  CHECK(s->canonical_request ==
        "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n"
        "x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
        "x-amz-date:20130524T000000Z\n\nhost;range;x-amz-content-sha256;x-amz-date\n"
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(s->string_to_sign ==
        "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
        "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
  CHECK(s->signature == "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
  CHECK(s->authorization ==
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
        "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
        "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

TEST_CASE("sigv4_put_object_signs_the_payload_hash_and_encodes_the_key", "[lake]") {
  const std::string body = "Welcome to Amazon S3.";
  const std::string payload = PayloadSha256Hex(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(body.data()), body.size()));
  CHECK(payload == "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
  SigV4Request r = ExampleRequest("PUT", EncodeS3Path("/test$file.text"), payload);
  CHECK(r.canonical_uri == "/test%24file.text");
  r.headers["Date"] = "Fri, 24 May 2013 00:00:00 GMT";
  r.headers["x-amz-storage-class"] = "REDUCED_REDUNDANCY";
  auto s = SignV4(r, ExampleCredentials());
  REQUIRE(s.ok());
  CHECK(s->signed_headers == "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class");
  CHECK(s->string_to_sign ==
        "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
        "9e0e90d9c76de8fa5b200d8c849cd5b8dc7a3be3951ddb7f6a76b4158342019d");
  CHECK(s->signature == "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");
}

TEST_CASE("sigv4_query_string_requests_match_the_documented_bucket_examples", "[lake]") {
  SigV4Request lifecycle = ExampleRequest("GET", "/", kEmptySha256);
  lifecycle.query = "lifecycle=";
  auto s = SignV4(lifecycle, ExampleCredentials());
  REQUIRE(s.ok());
  CHECK(s->string_to_sign.substr(s->string_to_sign.rfind('\n') + 1) ==
        "9766c798316ff2757b517bc739a67f6213b4ab36dd5da2f94eaebf79c77395ca");
  CHECK(s->signature == "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
  SigV4Request list = ExampleRequest("GET", "/", kEmptySha256);
  list.query = "max-keys=2&prefix=J";
  auto l = SignV4(list, ExampleCredentials());
  REQUIRE(l.ok());
  CHECK(l->signature == "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

TEST_CASE("sigv4_another_secret_or_unsigned_payload_changes_the_signature", "[lake]") {
  SigV4Request r = ExampleRequest("GET", EncodeS3Path("/test.txt"), kEmptySha256);
  SigV4Credentials wrong = ExampleCredentials();
  wrong.secret_access_key += "x";
  auto a = SignV4(r, ExampleCredentials());
  auto b = SignV4(r, wrong);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->signature != b->signature);
  CHECK(a->canonical_request == b->canonical_request);
  r.payload_sha256 = std::string(kUnsignedPayload);
  auto u = SignV4(r, ExampleCredentials());
  REQUIRE(u.ok());
  CHECK(u->canonical_request.ends_with("\nUNSIGNED-PAYLOAD"));
  CHECK(u->canonical_request.find("x-amz-content-sha256:UNSIGNED-PAYLOAD\n") != std::string::npos);
}

TEST_CASE("sigv4_path_style_uri_encodes_each_byte_once_and_keeps_slashes", "[lake]") {
  CHECK(EncodeS3Path("/lake/fleet/t/data/2026-12-07T09 a+b.parquet") == "/lake/fleet/t/data/2026-12-07T09%20a%2Bb.parquet");
  CHECK(EncodeS3Path("/b/k~_-.") == "/b/k~_-.");
  CHECK(EncodeS3Path("/b/%") == "/b/%25");
  CHECK(AmzDateOf(1369353600) == "20130524T000000Z");
}

TEST_CASE("sigv4_refuses_a_request_missing_what_it_signs", "[lake]") {
  SigV4Request r = ExampleRequest("GET", "/b/k", kEmptySha256);
  r.host.clear();
  CHECK_FALSE(SignV4(r, ExampleCredentials()).ok());
  r = ExampleRequest("GET", "/b/k", kEmptySha256);
  r.amz_date = "2013-05-24";
  auto bad_date = SignV4(r, ExampleCredentials());
  REQUIRE_FALSE(bad_date.ok());
  CHECK(bad_date.error().message.find("2013-05-24") != std::string::npos);
  r = ExampleRequest("GET", "/b/k", kEmptySha256);
  SigV4Credentials none = ExampleCredentials();
  none.secret_access_key.clear();
  CHECK_FALSE(SignV4(r, none).ok());
  r.headers["bad name"] = "x";
  CHECK_FALSE(SignV4(r, ExampleCredentials()).ok());
}

}  // namespace unit_lake_sigv4_test
