# Makefile — the one entry point: `make`, `make install`, `make test`, `make demo`.
#
# The extension (extension/*.cpp -> trellara.so) is built with PGXS; core, the `trellara` command
# and the tests are built by CMake into build/. The extension links build/core/libtrellara_core.a,
# so the extension and the command run the same core code.

EXTENSION   = trellara
MODULE_big  = trellara
EXT_SOURCES := $(shell find extension -name '*.cpp' | sort)
OBJS        = $(EXT_SOURCES:.cpp=.o)
DATA        = $(wildcard sql/trellara--*.sql)
PGFILEDESC  = "trellara - change data capture with exactly-once apply"

BUILD_DIR   ?= build
CMAKE_BUILD_TYPE ?= RelWithDebInfo
CORE_LIB    = $(BUILD_DIR)/core/libtrellara_core.a
# Kept out of git: CMake's build tree, pg_regress output, generated protobuf-c code.
EXTRA_CLEAN = $(BUILD_DIR) regress/results regress/regression.diffs regress/regression.out

# The library reports the version of the control file it was built with (trellara.version()).
TRELLARA_VERSION := $(shell sed -n "s/^default_version *= *'\(.*\)'/\1/p" trellara.control)

# Postgres headers are system headers for us: PG15's use `register` and trip -Wregister in C++20.
# PG15 defines PGDLLEXPORT empty on Linux; with -fvisibility=hidden the entry points
# (PG_MODULE_MAGIC, _PG_init, PG_FUNCTION_INFO_V1 functions) must be exported explicitly.
PG_CPPFLAGS = -isystem $(includedir_server) -Icore/include -Iextension -I$(BUILD_DIR)/proto \
              '-DPGDLLEXPORT=__attribute__((visibility("default")))' \
              '-DTRELLARA_VERSION="$(TRELLARA_VERSION)"'
# -g1 (line tables only, after pg_config's -g): as the CMake build, half the compile time.
PG_CXXFLAGS = -std=c++20 -fvisibility=hidden -Wall -Wextra -Werror -Wno-missing-field-initializers -g1
# --exclude-libs: core's symbols stay private to trellara.so instead of being exported into the
# backend's global namespace, where they could clash with another library's.
# No -lzstd / -lavro: the lake's sources (core/src/lake, which use them) are objects of their own in
# the archive (CMakeLists.txt) and the extension references none of them.
# -lpq: the standby's slot sync worker (extension/failover/slot_sync.cpp) reads the primary's slots.
SHLIB_LINK  = $(CORE_LIB) -lprotobuf-c -lpq -lcrypto -lisal -luring -lstdc++ -Wl,--exclude-libs,ALL

# pg_regress suites (regress/sql/*.sql, regress/expected/*.out). `make test` runs them against a
# throwaway cluster (tests/run-all); `make installcheck` runs them against the server that
# PGHOST/PGPORT point at, with the extension installed and shared_preload_libraries=trellara.
REGRESS      = $(sort $(basename $(notdir $(wildcard regress/sql/*.sql))))
REGRESS_OPTS = --inputdir=regress --outputdir=$(BUILD_DIR)/regress

# No LLVM bitcode for JIT inlining: clang-14 would have to compile our C++20 a second time and the
# extension has no functions worth inlining into JIT-compiled expressions.
override with_llvm = no
# Track header dependencies of the extension objects (.deps/*.Po): a changed shared-memory struct
# in a header must rebuild every object that uses it, or processes disagree on its layout.
override autodepend = yes

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# libpq's client headers for the slot sync worker only, searched after the server's (the client
# directory has its own pg_config.h, which must never shadow the server's).
extension/failover/slot_sync.o: override CPPFLAGS += -isystem $(shell $(PG_CONFIG) --includedir)

.PHONY: deps core install-cli install-ext test check demo demo-cluster demo-lake soak unit regress integration correctness-report \
        verify-correctness-report

deps:
	@scripts/install-deps

# CMake owns core, the command and the tests; always ask it (it is incremental). CMAKE_TARGETS
# narrows what it builds (make demo: the command and core only, not the test binaries).
CMAKE_TARGETS ?=
core:
	@scripts/install-deps --check
	@cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(CMAKE_BUILD_TYPE) $(CMAKE_ARGS) >/dev/null
	@cmake --build $(BUILD_DIR) -j$$(nproc) $(if $(CMAKE_TARGETS),--target $(CMAKE_TARGETS))

$(OBJS): | core
# The library is CMake's output: a rule that runs after `core` (never in parallel with it, so
# `make -j` works on a clean clone) and leaves the file to CMake.
$(CORE_LIB): core
	@:
$(shlib): $(CORE_LIB)
all: core

ifndef TRELLARA_EXTENSION_ONLY
install: install-cli
endif
# The extension alone (no /usr/local/bin/trellara), e.g. into a scripts/dev-private-pg copy.
install-ext: all
	$(MAKE) install TRELLARA_EXTENSION_ONLY=1
install-cli: core
	install -D -m 0755 $(BUILD_DIR)/bin/trellara $(DESTDIR)/usr/local/bin/trellara

# `make test`: dependencies, build, install, then every suite; ends with one summary line.
test: deps
	$(MAKE) -j$$(nproc) all
	$(MAKE) install
	@tests/run-all --build-dir $(BUILD_DIR)

# Builds only what the demo runs (the extension, core and the `trellara` command).
demo: deps
	$(MAKE) -j$$(nproc) all CMAKE_TARGETS="trellara"
	$(MAKE) install CMAKE_TARGETS="trellara"
	@scripts/demo

# The same kind of flow through a 3-node NATS JetStream cluster on this machine (docs/broker.md):
# trellara forward, a remote trellara apply reading the stream, quorum loss and a lost message.
demo-cluster: deps
	$(MAKE) -j$$(nproc) all CMAKE_TARGETS="trellara"
	$(MAKE) install CMAKE_TARGETS="trellara"
	@scripts/demo-cluster

# Four store clusters fanned in to one Iceberg lake in epochs (docs/lake.md): an epoch published
# with a gap, the late store completing it, the table read by independent readers (needs node/npm).
demo-lake: deps
	$(MAKE) -j$$(nproc) all CMAKE_TARGETS="trellara"
	$(MAKE) install CMAKE_TARGETS="trellara"
	@scripts/demo-lake

# A long qualification run outside CI (docs/soak.md, docs/correctness.md "Evidence of long runs"):
# `trellara soak` on throwaway clusters for SOAK_DURATION, its result appended to evidence/, which
# the correctness report reads for the 24-hour rows. Unattended; stops everything it started.
SOAK_DURATION ?= 24h
soak: deps
	$(MAKE) -j$$(nproc) all CMAKE_TARGETS="trellara"
	$(MAKE) install CMAKE_TARGETS="trellara"
	python3 bench/soak/soak_window.py --duration $(SOAK_DURATION) --evidence-dir evidence \
	  --output $(BUILD_DIR)/soak/soak-$(SOAK_DURATION).json

# The inner loop (README): unit tests, the simulator (200 randomized seeds), pg_regress and a smoke
# run of capture + apply; results go to build/results-check, never over a full run's build/results.
# PGXS defines a `check` that says it is not supported; ours replaces it only when asked for, so
# no other make run warns about the override.
CHECK_SCRIPTS ?= test_apply_end_to_end.py test_relay_varied_wal.py
ifneq ($(filter check,$(MAKECMDGOALS)),)
check: deps
	$(MAKE) -j$$(nproc) all
	$(MAKE) install
	@TRELLARA_SIM_RANDOM_SEEDS=200 tests/run-all --build-dir $(BUILD_DIR) --results-dir $(BUILD_DIR)/results-check \
	  --scripts $(CHECK_SCRIPTS)
endif

# The committed correctness report (docs/correctness.md, "The committed report"). Write it from
# the results of a full `make test` of a committed tree, then commit it; CI runs
# verify-correctness-report after `make test` (.ci/run): it fails when the committed report's
# outcomes (matrix, set of scenarios, each row's status, faults fired, defect caught) are not this
# run's results (docs/correctness.md section 4).
CORRECTNESS_REPORT = docs/correctness-report.html
correctness-report:
	$(BUILD_DIR)/bin/trellara chaos report --results $(BUILD_DIR)/results --output $(CORRECTNESS_REPORT)

verify-correctness-report:
	$(BUILD_DIR)/bin/trellara chaos verify --report $(CORRECTNESS_REPORT) --results $(BUILD_DIR)/results
