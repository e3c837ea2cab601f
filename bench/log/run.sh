#!/usr/bin/env bash
# bench/log/run.sh — local log append benchmark, three modes side by side in one run:
#   group commit (default writer), --sync-every-record, and a sequential-write baseline
#   (same frames written with pwrite, one fdatasync at the end).
# Runs the modes interleaved for REPS repetitions, then prints medians and the two ratios the
# log's targets are stated in. A benchmark, never a pass/fail test: it exits 0 whatever the
# numbers are. It must never write outside a fresh temporary directory under BENCH_DIR.
#
# Usage: bench/log/run.sh [REPS]        (env: RECORDS, SYNC_RECORDS, RECORD_BYTES, BENCH_DIR,
#                                        TRELLARA_BIN)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
bin="${TRELLARA_BIN:-$repo/build/bin/trellara}"
reps="${1:-5}"
records="${RECORDS:-200000}"
sync_records="${SYNC_RECORDS:-2000}"   # one fdatasync each: a smaller count keeps the run short
record_bytes="${RECORD_BYTES:-1024}"
base="${BENCH_DIR:-/var/tmp}"          # a real disk, not tmpfs: fdatasync must mean something

[ -x "$bin" ] || { echo "bench/log: $bin not found; build first (make core) or set TRELLARA_BIN" >&2; exit 2; }
work="$(mktemp -d "$base/trellara-log-bench-XXXXXX")"
trap 'rm -rf "$work"' EXIT
results="$work/results.jsonl"

run() {  # run MODE-FLAGS...; appends one JSON object per run to $results
  local dir="$work/run-$RANDOM$RANDOM"
  "$bin" log bench --dir "$dir" --record-bytes "$record_bytes" --format json "$@" | tr -d '\n' >>"$results"
  echo >>"$results"
  rm -rf "$dir"
  # Commit the deletion now (journal, and discards on a file system mounted with -o discard), so
  # that its cost is not charged to the first fdatasync of whichever mode runs next.
  sync -f "$work"
}

echo "trellara log bench: $reps repetitions, $records records of $record_bytes bytes" \
     "($sync_records for --sync-every-record), in $base, $(nproc) cores, kernel $(uname -r)"
for ((i = 1; i <= reps; i++)); do
  run --records "$records" --sequential-baseline
  run --records "$records"
  run --records "$sync_records" --sync-every-record
done

python3 - "$results" <<'PY'
import json, statistics, sys
runs = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
by_mode = {}
for r in runs:
    by_mode.setdefault(r["mode"], []).append(r)
def med(mode, key):
    values = [r[key] for r in by_mode[mode] if r[key] is not None]
    return statistics.median(values) if values else None
print(f'{"mode":22} {"records/s":>12} {"MB/s":>9} {"fsyncs":>8} {"p50 ack us":>11} {"p99 ack us":>11}')
for mode in ("group-commit", "sync-every-record", "sequential-baseline"):
    p50, p99 = med(mode, "p50_ack_us"), med(mode, "p99_ack_us")
    print(f'{mode:22} {med(mode, "records_per_s"):12.0f} {med(mode, "mb_per_s"):9.1f} {med(mode, "fsyncs"):8.0f} '
          f'{(f"{p50:11.0f}" if p50 is not None else "          -")} {(f"{p99:11.0f}" if p99 is not None else "          -")}')
rec_ratio = med("group-commit", "records_per_s") / med("sync-every-record", "records_per_s")
mb_ratio = med("group-commit", "mb_per_s") / med("sequential-baseline", "mb_per_s")
print(f"group commit / sync-every-record records/s: {rec_ratio:.1f}x   (target >= 20x)")
print(f"group commit / sequential baseline MB/s:    {mb_ratio * 100:.0f}%   (target >= 70%)")
per_rep = [g["mb_per_s"] / b["mb_per_s"] for g, b in zip(by_mode["group-commit"], by_mode["sequential-baseline"])]
print("per-repetition MB/s ratios: " + " ".join(f"{x * 100:.0f}%" for x in per_rep))
PY
