// uring_pattern_probe.cpp — a bare liburing loop with the log writer's I/O pattern, to separate
// the cost of the pattern from the cost of the writer: 200 MiB written in fixed chunks through
// io_uring, at most WINDOW bytes unacknowledged, one range fdatasync at a time covering the
// completed writes. A measurement aid for docs/log.md, not part of the product; it must never be
// pointed at a file that matters (it writes and deletes /var/tmp/gcprobe.dat).
//
// Build and run: g++ -O2 -o /tmp/uring_pattern_probe bench/log/uring_pattern_probe.cpp -luring
//                /tmp/uring_pattern_probe PREALLOC(0|1) WINDOW_BYTES CHUNK_BYTES
//                e.g. /tmp/uring_pattern_probe 0 8388608 131072
#include <liburing.h>
#include <fcntl.h>
#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <deque>
int main(int argc, char** argv) {
  int prealloc = atoi(argv[1]); size_t window = atol(argv[2]); size_t chunk = atol(argv[3]);
  size_t total = 200u << 20;
  io_uring ring; io_uring_queue_init(256, &ring, 0);
  int fd = open("/var/tmp/gcprobe.dat", O_RDWR|O_CREAT|O_TRUNC, 0600);
  if (prealloc) { std::vector<char> z(8<<20, 0); for (size_t p = 0; p < total; p += z.size()) pwrite(fd, z.data(), z.size(), p); fdatasync(fd); }
  std::vector<char> buf(chunk, 'x');
  auto t0 = std::chrono::steady_clock::now();
  size_t submitted = 0, written = 0, acked = 0, sync_to = 0; bool sync_busy = false; int syncs = 0, inflight = 0;
  while (acked < total) {
    while (submitted < total && submitted - acked < window) {
      auto* sqe = io_uring_get_sqe(&ring); io_uring_prep_write(sqe, fd, buf.data(), chunk, submitted); sqe->user_data = submitted + chunk; submitted += chunk; inflight++;
    }
    if (!sync_busy && written > acked) { auto* sqe = io_uring_get_sqe(&ring); io_uring_prep_fsync(sqe, fd, IORING_FSYNC_DATASYNC); sqe->off = acked; sqe->len = written - acked; sqe->user_data = 0; sync_to = written; sync_busy = true; syncs++; inflight++; }
    io_uring_submit_and_wait(&ring, 1);
    io_uring_cqe* cqe;
    while (io_uring_peek_cqe(&ring, &cqe) == 0) {
      if (cqe->user_data == 0) { sync_busy = false; acked = sync_to; } else if (cqe->user_data > written) written = cqe->user_data;  // approx: in-order
      io_uring_cqe_seen(&ring, cqe); inflight--;
    }
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  printf("prealloc %d window %zu chunk %zu: %.1f MB/s syncs %d\n", prealloc, window, chunk, total / s / 1e6, syncs);
  unlink("/var/tmp/gcprobe.dat");
}
