// pack_zstd.cpp — a packed broker message's body on the wire (pack.h EncodePackMessage /
// DecodePackMessage): format 1 as EncodePack writes it, or format 2, that body as one zstd frame.
// Compiled alone (CMakeLists.txt), like the lake's sources: trellara.so links core's archive and
// must never pull in an object that needs libzstd. Talks to no broker.
#include <zstd.h>

#include "trellara/base/assert.h"
#include "trellara/broker/pack.h"

namespace trellara::broker {

PackMessageBody EncodePackMessage(std::span<const log::LogRecord> records) {
  PackMessageBody plain{EncodePack(records), kPackFormat};
  if (plain.bytes.size() > kPackZstdContentBytesMax) return plain;
  std::vector<uint8_t> packed(ZSTD_compressBound(plain.bytes.size()));
  const size_t written =
      ZSTD_compress(packed.data(), packed.size(), plain.bytes.data(), plain.bytes.size(), kPackZstdLevel);
  // A failure to compress (out of memory) only costs the saving: the plain body is as good.
  if (ZSTD_isError(written) || written >= plain.bytes.size()) return plain;
  packed.resize(written);
  return PackMessageBody{std::move(packed), kPackFormatZstd};
}

Result<std::vector<log::LogRecord>> DecodePackMessage(const std::string& format, uint64_t first_offset, uint64_t count,
                                                      std::span<const uint8_t> body) {
  if (format == kPackFormat) return DecodePack(first_offset, count, body);
  const std::string what = "compressed packed message of offsets " + std::to_string(first_offset) + ".." +
                           std::to_string(first_offset + count - 1) + " (" + std::to_string(body.size()) + " bytes)";
  if (format != kPackFormatZstd) return MakeError(what + ": unknown " + kFormatHeader + " \"" + format + "\"");
  const unsigned long long content = ZSTD_getFrameContentSize(body.data(), body.size());
  if (content == ZSTD_CONTENTSIZE_ERROR || content == ZSTD_CONTENTSIZE_UNKNOWN)
    return MakeError(what + " is not a zstd frame that names its content size");
  if (content > kPackZstdContentBytesMax)
    return MakeError(what + " names " + std::to_string(content) + " bytes of content, more than the " +
                     std::to_string(kPackZstdContentBytesMax) + " a message may hold");
  const size_t frame = ZSTD_findFrameCompressedSize(body.data(), body.size());
  if (ZSTD_isError(frame)) return MakeError(what + " is torn: " + ZSTD_getErrorName(frame));
  if (frame != body.size())
    return MakeError(what + " holds " + std::to_string(body.size() - frame) + " bytes past its zstd frame");
  std::vector<uint8_t> plain(static_cast<size_t>(content));
  const size_t got = ZSTD_decompress(plain.data(), plain.size(), body.data(), body.size());
  if (ZSTD_isError(got)) return MakeError(what + " does not decompress: " + ZSTD_getErrorName(got));
  if (got != plain.size())
    return MakeError(what + " decompresses to " + std::to_string(got) + " bytes, not the " +
                     std::to_string(plain.size()) + " its frame names");
  return DecodePack(first_offset, count, plain);
}

}  // namespace trellara::broker
