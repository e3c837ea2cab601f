// stream_spill.cpp — the relay's store for streamed transactions (see stream_spill.h): in-memory
// lists, per-transaction spill files, abort discard, bounded read-back at commit, and the replay
// of a committed streamed transaction through a TransactionAssembler.
//
// Never writes to the log and never fsyncs (a crash restarts decoding of the transaction). Never
// reads a spill file whole: one bounded buffer, or one frame's own vector for a frame larger than
// the buffer.
#include "trellara/capture/stream_spill.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstring>

#include "trellara/record/checksum.h"
#include "trellara/record/codec.h"
#include "trellara/log/crc32c.h"

namespace trellara {

namespace {

constexpr size_t kFrameHeaderBytes = 12;             // u32 length, u32 xid, u32 crc32c
constexpr size_t kReadBufferBytes = size_t{1} << 20;  // read-back buffer of Commit
constexpr uint32_t kMaxSpillMemoryChanges = 1u << 20;
constexpr uint64_t kMaxSpillMemoryBytes = 1ull << 30;
constexpr char kSpillSuffix[] = ".spill";
constexpr char kRestartHint[] = "the relay fails and the slot decodes the transaction again from its start";

std::string Errno(int err) { return std::strerror(err); }

void PutU32(uint8_t* out, uint32_t v) {
  out[0] = static_cast<uint8_t>(v);
  out[1] = static_cast<uint8_t>(v >> 8);
  out[2] = static_cast<uint8_t>(v >> 16);
  out[3] = static_cast<uint8_t>(v >> 24);
}

uint32_t GetU32(const uint8_t* in) {
  return static_cast<uint32_t>(in[0]) | static_cast<uint32_t>(in[1]) << 8 | static_cast<uint32_t>(in[2]) << 16 |
         static_cast<uint32_t>(in[3]) << 24;
}

bool EndsWith(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() > n && s.compare(s.size() - n, n, suffix) == 0;
}

// mkdir -p with mode 0700 for the directories it creates.
Status MakeDirectories(const std::string& path) {
  if (path.empty()) return MakeError("stream spill directory is empty; set it to a directory the relay may write");
  for (size_t pos = 1; pos <= path.size(); pos++) {
    if (pos != path.size() && path[pos] != '/') continue;
    const std::string prefix = path.substr(0, pos);
    if (::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST)
      return MakeError("cannot create stream spill directory " + prefix + ": " + Errno(errno) +
                       "; create it (mode 0700) or point the spill directory elsewhere");
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return MakeError("stream spill directory " + path + " is not a directory; remove what is there or point the "
                     "spill directory elsewhere");
  return Status::Ok();
}

// pwritev of every iovec at `offset`, in batches of IOV_MAX, resuming after short writes and EINTR.
Status WriteAll(int fd, uint64_t offset, std::vector<iovec> iov, const std::string& path, uint32_t top_xid) {
  size_t first = 0;
  while (first < iov.size()) {
    const int count = static_cast<int>(std::min<size_t>(iov.size() - first, IOV_MAX));
    const ssize_t n = ::pwritev(fd, iov.data() + first, count, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return MakeError("cannot write spill file " + path + " of streamed transaction " + std::to_string(top_xid) +
                       " at offset " + std::to_string(offset) + ": " + Errno(errno) + "; free space in the spill " +
                       "directory (or raise the in-memory limits); " + kRestartHint);
    }
    if (n == 0)
      return MakeError("spill file " + path + " of streamed transaction " + std::to_string(top_xid) +
                       ": write at offset " + std::to_string(offset) + " made no progress; " + kRestartHint);
    offset += static_cast<uint64_t>(n);
    size_t left = static_cast<size_t>(n);
    while (left > 0 && first < iov.size()) {
      if (left >= iov[first].iov_len) {
        left -= iov[first].iov_len;
        first++;
      } else {
        iov[first].iov_base = static_cast<uint8_t*>(iov[first].iov_base) + left;
        iov[first].iov_len -= left;
        left = 0;
      }
    }
    while (first < iov.size() && iov[first].iov_len == 0) first++;
  }
  return Status::Ok();
}

// pread of exactly `len` bytes at `offset`; fewer only at end of file (returned count).
Result<size_t> ReadUpTo(int fd, uint64_t offset, uint8_t* out, size_t len) {
  size_t done = 0;
  while (done < len) {
    const ssize_t n = ::pread(fd, out + done, len - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return MakeError(Errno(errno));
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return done;
}

}  // namespace

Result<std::unique_ptr<StreamSpill>> StreamSpill::Open(SpillOptions options) {
  if (options.memory_changes > kMaxSpillMemoryChanges)
    return MakeError("stream spill memory_changes " + std::to_string(options.memory_changes) + " is above the limit " +
                     std::to_string(kMaxSpillMemoryChanges) + "; choose a value from 0 to " +
                     std::to_string(kMaxSpillMemoryChanges));
  if (options.memory_bytes > kMaxSpillMemoryBytes)
    return MakeError("stream spill memory_bytes " + std::to_string(options.memory_bytes) + " is above the limit " +
                     std::to_string(kMaxSpillMemoryBytes) + "; choose a value from 0 to " +
                     std::to_string(kMaxSpillMemoryBytes));
  while (options.directory.size() > 1 && options.directory.back() == '/') options.directory.pop_back();
  TRELLARA_TRY(MakeDirectories(options.directory));
  std::unique_ptr<StreamSpill> spill(new StreamSpill(std::move(options)));
  const std::string& dir = spill->options_.directory;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr)
    return MakeError("cannot list stream spill directory " + dir + ": " + Errno(errno) +
                     "; give the relay read access to it or point the spill directory elsewhere");
  // Spill files are never fsync'ed and never reused: whatever a previous run left is stale.
  Status status;
  for (;;) {
    errno = 0;
    const dirent* entry = ::readdir(d);
    if (entry == nullptr) {
      if (errno != 0)
        status = MakeError("cannot list stream spill directory " + dir + ": " + Errno(errno));
      break;
    }
    const std::string name = entry->d_name;
    if (!EndsWith(name, kSpillSuffix)) continue;
    const std::string path = dir + "/" + name;
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;  // only regular files
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      status = MakeError("cannot remove stale spill file " + path + ": " + Errno(errno) +
                         "; remove it by hand (spill files are not needed after a restart)");
      break;
    }
    spill->removed_at_open_++;
  }
  ::closedir(d);
  if (!status.ok()) return status.error();
  return spill;
}

StreamSpill::~StreamSpill() {
  while (!open_.empty()) Forget(open_.begin()->first);
}

std::string StreamSpill::FileOf(uint32_t top_xid) const {
  return options_.directory + "/xid-" + std::to_string(top_xid) + kSpillSuffix;
}

bool StreamSpill::Has(uint32_t top_xid) const { return open_.count(top_xid) != 0; }

SpillStats StreamSpill::stats() const {
  SpillStats s;
  s.transactions_open = open_.size();
  for (const auto& [top, tx] : open_) {
    s.memory_bytes += tx.memory_bytes;
    if (tx.fd >= 0) s.files_open++;
  }
  s.spilled_bytes = spilled_bytes_;
  s.records_discarded = records_discarded_;
  return s;
}

// Records of an xid that was already reported aborted are kept like any other: PostgreSQL never
// reuses an xid, so such a record cannot arrive from a correct stream, and it is skipped at commit
// all the same because the xid stays in `aborted`.
Status StreamSpill::Add(uint32_t top_xid, uint32_t xid, std::span<const uint8_t> record) {
  if (record.empty())
    return MakeError("stream record of xid " + std::to_string(xid) + " (streamed transaction " +
                     std::to_string(top_xid) + ") is empty; the output plugin sent no change bytes");
  if (record.size() > kMaxStreamRecordBytes)
    return MakeError("stream record of xid " + std::to_string(xid) + " (streamed transaction " +
                     std::to_string(top_xid) + ") is " + std::to_string(record.size()) + " bytes, above the " +
                     std::to_string(kMaxStreamRecordBytes) + "-byte record limit; the transaction cannot be captured");
  Transaction& tx = open_[top_xid];
  tx.memory.push_back(Pending{xid, std::vector<uint8_t>(record.begin(), record.end())});
  tx.memory_bytes += record.size();
  if (tx.memory.size() > options_.memory_changes || tx.memory_bytes > options_.memory_bytes)
    return Flush(top_xid, tx);
  return Status::Ok();
}

Status StreamSpill::Flush(uint32_t top_xid, Transaction& tx) {
  if (tx.memory.empty()) return Status::Ok();
  const std::string path = FileOf(top_xid);
  if (tx.fd < 0) {
    int fd;
    do {
      fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_RDWR | O_CLOEXEC, 0600);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0)
      return MakeError("cannot create spill file " + path + " of streamed transaction " + std::to_string(top_xid) +
                       ": " + Errno(errno) + "; check the spill directory's permissions and free space; " +
                       kRestartHint);
    tx.fd = fd;
    tx.file_bytes = 0;
    tx.file_records = 0;
  }
  // One pwritev per IOV_MAX iovecs (header + bytes per record): no per-record write, no copy.
  std::vector<std::array<uint8_t, kFrameHeaderBytes>> headers(tx.memory.size());
  std::vector<iovec> iov;
  iov.reserve(2 * tx.memory.size());
  uint64_t total = 0;
  for (size_t i = 0; i < tx.memory.size(); i++) {
    const Pending& p = tx.memory[i];
    PutU32(headers[i].data(), static_cast<uint32_t>(p.bytes.size()));
    PutU32(headers[i].data() + 4, p.xid);
    PutU32(headers[i].data() + 8, Crc32c(p.bytes.data(), p.bytes.size()));
    iov.push_back(iovec{headers[i].data(), kFrameHeaderBytes});
    iov.push_back(iovec{const_cast<uint8_t*>(p.bytes.data()), p.bytes.size()});
    total += kFrameHeaderBytes + p.bytes.size();
  }
  Status s = WriteAll(tx.fd, tx.file_bytes, std::move(iov), path, top_xid);
  if (!s.ok()) {
    // Keep the file exactly as long as its whole frames; the records stay in memory.
    while (::ftruncate(tx.fd, static_cast<off_t>(tx.file_bytes)) != 0 && errno == EINTR) {
    }
    return s;
  }
  tx.file_bytes += total;
  tx.file_records += tx.memory.size();
  spilled_bytes_ += total;
  tx.memory.clear();
  tx.memory_bytes = 0;
  return Status::Ok();
}

Status StreamSpill::AbortSubtransaction(uint32_t top_xid, uint32_t xid) {
  // The top-level xid aborting is the whole transaction aborting: its subtransactions go with it.
  if (xid == top_xid) return AbortTransaction(top_xid);
  auto it = open_.find(top_xid);
  if (it == open_.end()) return Status::Ok();  // nothing of it was streamed here
  Transaction& tx = it->second;
  auto keep_end = std::stable_partition(tx.memory.begin(), tx.memory.end(),
                                        [xid](const Pending& p) { return p.xid != xid; });
  for (auto p = keep_end; p != tx.memory.end(); ++p) tx.memory_bytes -= p->bytes.size();
  records_discarded_ += static_cast<uint64_t>(tx.memory.end() - keep_end);
  tx.memory.erase(keep_end, tx.memory.end());
  tx.aborted.insert(xid);  // file frames of `xid` are skipped (and counted) on read-back
  return Status::Ok();
}

Status StreamSpill::AbortTransaction(uint32_t top_xid) {
  auto it = open_.find(top_xid);
  if (it == open_.end()) return Status::Ok();
  // Memory records of aborted subtransactions were counted when they were erased; file frames
  // of them were not counted yet.
  records_discarded_ += it->second.memory.size() + it->second.file_records;
  Forget(top_xid);
  return Status::Ok();
}

void StreamSpill::Forget(uint32_t top_xid) {
  auto it = open_.find(top_xid);
  if (it == open_.end()) return;
  if (it->second.fd >= 0) {
    ::close(it->second.fd);  // no retry on EINTR: the descriptor is released either way on Linux
    ::unlink(FileOf(top_xid).c_str());
  }
  open_.erase(it);
}

Status StreamSpill::Commit(uint32_t top_xid, const std::function<Status(std::span<const uint8_t>)>& each) {
  auto it = open_.find(top_xid);
  if (it == open_.end()) return Status::Ok();  // a streamed transaction with no kept change
  Transaction& tx = it->second;
  Status status;
  if (tx.fd >= 0) {
    const std::string path = FileOf(top_xid);
    auto fail = [&](uint64_t offset, const std::string& what) -> Status {
      return MakeError("spill file " + path + " of streamed transaction " + std::to_string(top_xid) +
                       ": frame at offset " + std::to_string(offset) + " " + what + "; " + kRestartHint);
    };
    struct stat st;
    if (::fstat(tx.fd, &st) != 0) {
      status = fail(0, "cannot be read back: fstat: " + Errno(errno));
    } else if (static_cast<uint64_t>(st.st_size) != tx.file_bytes) {
      status = MakeError("spill file " + path + " of streamed transaction " + std::to_string(top_xid) + " is " +
                         std::to_string(st.st_size) + " bytes, but " + std::to_string(tx.file_bytes) +
                         " bytes were written to it (truncated or appended to by something else); " + kRestartHint);
    }
    std::vector<uint8_t> buffer(status.ok() ? std::min<uint64_t>(kReadBufferBytes, tx.file_bytes) : 0);
    size_t begin = 0, end = 0;  // window [begin, end) of buffer holds file bytes [offset, ...)
    uint64_t offset = 0;        // file offset of buffer[begin]
    uint64_t read_to = 0;       // file offset of buffer[end]
    // Makes at least `want` bytes available in the window, if the buffer can hold them.
    auto fill = [&](size_t want) -> Status {
      if (end - begin >= want) return Status::Ok();
      std::memmove(buffer.data(), buffer.data() + begin, end - begin);
      end -= begin;
      begin = 0;
      auto n = ReadUpTo(tx.fd, read_to, buffer.data() + end, buffer.size() - end);
      if (!n.ok()) return fail(offset, "cannot be read back: " + n.error().message);
      end += *n;
      read_to += *n;
      if (end - begin < want) return fail(offset, "is cut short: the file ends inside it");
      return Status::Ok();
    };
    std::vector<uint8_t> large;  // a frame larger than the buffer is read into its own vector
    while (status.ok() && offset < tx.file_bytes) {
      if (tx.file_bytes - offset < kFrameHeaderBytes) {
        status = fail(offset, "is cut short: fewer bytes than a frame header remain");
        break;
      }
      status = fill(kFrameHeaderBytes);
      if (!status.ok()) break;
      const uint8_t* header = buffer.data() + begin;
      const uint32_t length = GetU32(header);
      const uint32_t xid = GetU32(header + 4);
      const uint32_t crc = GetU32(header + 8);
      if (length == 0 || length > kMaxStreamRecordBytes || length > tx.file_bytes - offset - kFrameHeaderBytes) {
        status = fail(offset, "has length " + std::to_string(length) + ", outside 1.." +
                                  std::to_string(std::min<uint64_t>(kMaxStreamRecordBytes,
                                                                    tx.file_bytes - offset - kFrameHeaderBytes)));
        break;
      }
      std::span<const uint8_t> bytes;
      if (kFrameHeaderBytes + length <= buffer.size()) {
        status = fill(kFrameHeaderBytes + length);
        if (!status.ok()) break;
        bytes = std::span<const uint8_t>(buffer.data() + begin + kFrameHeaderBytes, length);
        begin += kFrameHeaderBytes + length;
      } else {
        large.resize(length);
        const size_t have = end - begin - kFrameHeaderBytes;  // part of the frame already buffered
        std::memcpy(large.data(), buffer.data() + begin + kFrameHeaderBytes, have);
        auto n = ReadUpTo(tx.fd, read_to, large.data() + have, length - have);
        if (!n.ok()) {
          status = fail(offset, "cannot be read back: " + n.error().message);
          break;
        }
        if (*n != length - have) {
          status = fail(offset, "is cut short: the file ends inside it");
          break;
        }
        read_to += *n;
        begin = end = 0;
        bytes = std::span<const uint8_t>(large.data(), length);
      }
      if (Crc32c(bytes.data(), bytes.size()) != crc) {
        status = fail(offset, "(xid " + std::to_string(xid) + ", " + std::to_string(length) +
                                  " bytes) does not match its crc32c");
        break;
      }
      offset += kFrameHeaderBytes + length;
      if (tx.aborted.count(xid) != 0) {
        records_discarded_++;
        continue;
      }
      status = each(bytes);
    }
  }
  for (size_t i = 0; status.ok() && i < tx.memory.size(); i++) {
    const Pending& p = tx.memory[i];
    if (tx.aborted.count(p.xid) != 0) continue;  // not reachable: erased at abort; kept for safety
    status = each(std::span<const uint8_t>(p.bytes.data(), p.bytes.size()));
  }
  Forget(top_xid);
  return status;
}

Result<std::string> EncodeStreamRecord(const std::string& flow, uint32_t xid, Change change,
                                       const RelationInfo* relation,
                                       const std::vector<const RelationInfo*>& truncated) {
  const Op op = change.op;  // for errors: `change` is moved into the record below
  auto fail = [&](const std::string& what) {
    return MakeError("cannot build the stream record of a " + std::string(OpName(op)) + " of xid " +
                     std::to_string(xid) + ": " + what);
  };
  Envelope e;
  e.tx = TxIdentity{flow, 0, xid, kStreamRecordCommitLsn};
  if (relation != nullptr) {
    if (relation->oid != change.relation_oid)
      return fail("the change refers to relation oid " + std::to_string(change.relation_oid) +
                  " but the relation given is " + relation->schema + "." + relation->name + " (oid " +
                  std::to_string(relation->oid) + ")");
    e.relations.push_back(*relation);
  }
  for (const RelationInfo* t : truncated) {
    if (t == nullptr) return fail("a truncated relation is missing (null)");
    const bool seen = std::any_of(e.relations.begin(), e.relations.end(),
                                  [t](const RelationInfo& r) { return r.oid == t->oid; });
    if (!seen) e.relations.push_back(*t);
  }
  e.changes.push_back(std::move(change));
  // No checksum (zero) and the relations' fingerprints as given: a stream record never reaches the
  // log; its integrity on disk is the spill frame's CRC32C, and the assembler computes the
  // transaction's checksums when it logs it. Sealing it would hash every change twice more on the
  // relay's hottest path.
  e.boundary_mode = BoundaryMode::Whole;
  auto bytes = EncodeRecord(Record(std::move(e)));
  if (!bytes.ok()) return fail(bytes.error().message);
  return std::move(*bytes);
}

Status ReplayStreamedTransaction(StreamSpill& spill, const StreamedCommit& commit, TransactionAssembler& assembler,
                                 const RecordSink& sink) {
  assembler.Begin(commit.top_xid, commit.begin_lsn, commit.commit_lsn, commit.commit_time_us);
  uint64_t index = 0;
  Status status = spill.Commit(commit.top_xid, [&](std::span<const uint8_t> bytes) -> Status {
    const uint64_t at = index++;
    const auto label = [at] { return "stream record " + std::to_string(at); };  // for errors only
    auto decoded = DecodeRecord(bytes);
    if (!decoded.ok()) return MakeError(label() + ": " + decoded.error().message);
    auto* e = std::get_if<Envelope>(&*decoded);
    if (e == nullptr)
      return MakeError(label() + " is a " + RecordTypeName(TypeOf(*decoded)) + ", expected an envelope");
    if (e->tx.commit_lsn != kStreamRecordCommitLsn)
      return MakeError(label() + " (xid " + std::to_string(e->tx.xid) + ") carries commit LSN " +
                       FormatLsn(e->tx.commit_lsn) + ": it is a log record, not a stream record");
    if (e->changes.size() > 1)
      return MakeError(label() + " (xid " + std::to_string(e->tx.xid) + ") holds " +
                       std::to_string(e->changes.size()) + " changes, expected at most 1");
    if (e->changes.empty()) return Status::Ok();  // relations only: nothing to replay
    Change& change = e->changes.front();
    auto find = [e](uint32_t oid) -> const RelationInfo* {
      for (const auto& r : e->relations)
        if (r.oid == oid) return &r;
      return nullptr;
    };
    const RelationInfo* relation = nullptr;
    std::vector<const RelationInfo*> truncated;
    switch (change.op) {
      case Op::Insert:
      case Op::Update:
      case Op::Delete:
      case Op::Ddl:
        if (change.relation_oid != 0) {
          relation = find(change.relation_oid);
          if (relation == nullptr)  // DecodeRecord already refuses this; checked again, cheaply
            return MakeError(label() + " refers to relation oid " + std::to_string(change.relation_oid) +
                             " it does not describe");
        }
        break;
      case Op::Truncate:
        for (uint32_t oid : change.truncate.relation_oids) {
          const RelationInfo* r = find(oid);
          if (r == nullptr)
            return MakeError(label() + " truncates relation oid " + std::to_string(oid) + " it does not describe");
          truncated.push_back(r);
        }
        break;
      case Op::Message:
        break;
    }
    Status s = assembler.AddChange(std::move(change), relation, truncated, sink);
    if (!s.ok()) return MakeError(label() + ": " + s.error().message);
    return Status::Ok();
  });
  if (status.ok()) status = assembler.Commit(sink);
  if (status.ok()) return status;
  assembler.Reset();
  return MakeError("streamed transaction " + std::to_string(commit.top_xid) + " (commit " +
                   FormatLsn(commit.commit_lsn) + "): " + status.error().message);
}

}  // namespace trellara
