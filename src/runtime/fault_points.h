// Named points inside the checkpoint write path where tests simulate a crash. Production code
// calls fault_point("name") at each; it does nothing unless a test installed a hook, which may
// end the process there (tests/runtime/checkpoint_fault_test.cc forks a child per point and
// `_exit`s it, so the state left on disk is exactly what a SIGKILL at that point leaves).
//
// Thread-safety: install the hook before any checkpoint is written; calls are then read-only.
#pragma once

#include <functional>

namespace bw::runtime {

using FaultHook = std::function<void(const char* point)>;

// Installs (or, with an empty function, removes) the hook; returns the previous one.
FaultHook set_fault_hook(FaultHook hook);

// Calls the hook, if any, with `point`.
void fault_point(const char* point);

}  // namespace bw::runtime
