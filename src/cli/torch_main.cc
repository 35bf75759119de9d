// `breakwater-torch`: the executable that holds every subcommand, the LibTorch ones included
// (torch_commands.h). Users run `breakwater`, which execs this for `train`, `profile measure`, ...;
// the coordinator execs it again (/proc/self/exe) for each worker.
//
// OpenMP wait policy. LibTorch's intra-op threads are libgomp's, whose default is to spin for a
// while after each parallel region; with a few threads per worker and several workers on a loaded
// machine, the spinning threads steal the cores the others need (single-process training measured
// 4-20x slower with two threads than with one). PASSIVE makes idle threads sleep at once. libgomp
// reads OMP_WAIT_POLICY only when it is loaded, before main() runs, so setting it here would be
// too late: `breakwater` puts it in the environment before exec'ing us, the workers inherit it,
// and when this executable is started directly without it, main() sets it and execs itself once
// more. A value the user set is kept.
//
// Freed memory stays in the heap (docs/models.md, "Host memory and the gradient norm"). A step
// allocates and frees activations and gradients of 1-13 MB hundreds of times, the same sizes
// every step. glibc's defaults map blocks above a dynamic threshold (128 KB, rising to the
// largest block freed) and give the top of the heap back to the kernel once 2 x that threshold
// is free there, so each step faulted its memory in again: 44,000 page faults per step (170 MB
// zeroed by the kernel, ~9% of the step in system time) at gpt2-124m's width, against 4,000 for
// the same model in eager PyTorch (whose Python process keeps more of its heap). With blocks
// below 256 MB served from the heap and the top kept up to 1 GB, a step after the first faults
// ~600 pages; a worker's resident memory stays at its step's high-water mark, which every step
// reaches again anyway (cli::keep_freed_memory). Allocator settings the user gave are kept, as for
// the wait policy: docs/runtime.md measures the sharded stages' memory with a fixed mmap threshold
// that way.
//
// Children without LibTorch's start-up again. `train`, `coordinator` and `agent` start children of
// this same executable (local agents, workers), and each exec of it spends 0.3-0.45 s of CPU in
// LibTorch's static initialisers. These subcommands fork a server first, while the process has
// one thread; their children are forks of it that run `child_main` (elastic/fork_server.h).
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "cli/app.h"
#include "elastic/fork_server.h"
#include "elastic/process.h"
#include "runtime/log.h"

namespace {

bool spawns_children(int argc, char** argv) {
  if (argc < 2) return false;
  if (const char* env = std::getenv("BW_FORK_SERVER");
      env != nullptr && std::strcmp(env, "0") == 0) {
    return false;  // exec every child, as before the fork server (docs/cli.md)
  }
  for (const char* command : {"train", "coordinator", "agent"}) {
    if (std::strcmp(argv[1], command) == 0) return true;
  }
  return false;
}

// main() past its set-up; also what a child of the fork server runs, with its own argv.
int child_main(int argc, char** argv) {
  if (spawns_children(argc, argv)) {
    std::string why;
    auto server = bw::elastic::ForkServer::start(child_main, &why);
    if (server) {
      bw::elastic::ForkServer::install(std::move(server));
    } else {
      bw::runtime::log(bw::runtime::LogLevel::kWarn,
                       "no fork server ({}): each child is exec'd and pays LibTorch's start-up",
                       why);
    }
  }
  return bw::cli::run_app(argc, argv);
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) {
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    execv("/proc/self/exe", argv);  // on failure, carry on with the default policy
  }
  bw::cli::keep_freed_memory();
  // The coordinator's measure of how long this binary takes to start (an agent's allowance).
  bw::elastic::note_main_entered();
  return child_main(argc, argv);
}
