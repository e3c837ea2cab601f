// relay/shared_state.cpp — allocation and lookup of the shared status board (see shared_state.h).
extern "C" {
#include "postgres.h"

#include <signal.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/shmem.h"
}

#include <cstring>

#include "relay/relay.h"
#include "relay/shared_state.h"

namespace trellara::relay {

namespace {
Board* board = nullptr;
shmem_request_hook_type prev_shmem_request_hook = nullptr;
shmem_startup_hook_type prev_shmem_startup_hook = nullptr;

Size BoardSize() { return add_size(offsetof(Board, flows), mul_size(sizeof(FlowSlot), MaxFlows())); }

void RequestHook() {
  if (prev_shmem_request_hook) prev_shmem_request_hook();
  RequestAddinShmemSpace(BoardSize());
  RequestNamedLWLockTranche("trellara", 1);
}

void StartupHook() {
  if (prev_shmem_startup_hook) prev_shmem_startup_hook();
  LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
  bool found = false;
  board = static_cast<Board*>(ShmemInitStruct("trellara relay board", BoardSize(), &found));
  if (!found) {
    std::memset(static_cast<void*>(board), 0, BoardSize());
    board->lock = &(GetNamedLWLockTranche("trellara"))->lock;
    board->max_flows = MaxFlows();
  }
  LWLockRelease(AddinShmemInitLock);
}
}  // namespace

const char* FlowStateName(FlowState state) {
  switch (state) {
    case FlowState::kStopped: return "stopped";
    case FlowState::kStarting: return "starting";
    case FlowState::kRunning: return "running";
    case FlowState::kBackoff: return "backoff";
    case FlowState::kFailed: return "failed";
    case FlowState::kError: return "error";
  }
  return "unknown";
}

void InstallSharedStateHooks() {
  prev_shmem_request_hook = shmem_request_hook;
  shmem_request_hook = RequestHook;
  prev_shmem_startup_hook = shmem_startup_hook;
  shmem_startup_hook = StartupHook;
}

namespace {
XLogRecPtr last_commit_woken = InvalidXLogRecPtr;

// XactCallback: must never raise an error (it runs after the commit is final).
void WakeRelaysAtCommit(XactEvent event, void*) {
  if (event != XACT_EVENT_COMMIT || board == nullptr) return;
  // XactLastCommitEnd moves only when this transaction wrote a commit record.
  if (XactLastCommitEnd == InvalidXLogRecPtr || XactLastCommitEnd == last_commit_woken) return;
  last_commit_woken = XactLastCommitEnd;
  // An asynchronous commit not flushed yet: the relay reads only flushed WAL; its poll finds it.
  if (XactLastCommitEnd > GetFlushRecPtr(nullptr)) return;
  for (int i = 0; i < board->max_flows; i++) {
    volatile FlowSlot* s = &board->flows[i];
    const int32_t procno1 = s->wake_procno1;
    if (!s->in_use || procno1 <= 0 || procno1 > static_cast<int32_t>(ProcGlobal->allProcCount)) continue;
    if (s->database != MyDatabaseId) continue;
    SetLatch(&ProcGlobal->allProcs[procno1 - 1].procLatch);
  }
}
}  // namespace

void RegisterCommitWake() { RegisterXactCallback(WakeRelaysAtCommit, nullptr); }

// Backends are forked from the postmaster after StartupHook ran there, so they inherit `board`.
Board* SharedBoard() { return board; }

FlowSlot* FindFlowSlot(Board* b, const char* name, bool reserve) {
  FlowSlot* free_slot = nullptr;
  for (int i = 0; i < b->max_flows; i++) {
    FlowSlot* s = &b->flows[i];
    if (s->in_use && std::strncmp(s->name, name, NAMEDATALEN) == 0) return s;
    if (!s->in_use && free_slot == nullptr) free_slot = s;
  }
  if (!reserve || free_slot == nullptr) return nullptr;
  std::memset(static_cast<void*>(free_slot), 0, sizeof(FlowSlot));
  free_slot->in_use = true;
  strlcpy(free_slot->name, name, NAMEDATALEN);
  return free_slot;
}

void WakeLauncher() {
  Board* b = SharedBoard();
  if (b == nullptr) return;
  LWLockAcquire(b->lock, LW_SHARED);
  pid_t pid = b->launcher_pid;
  LWLockRelease(b->lock);
  if (pid != 0) (void)kill(pid, SIGUSR1);
}

}  // namespace trellara::relay
