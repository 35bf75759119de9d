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
#include <unistd.h>

#include <cstdlib>

#include "cli/app.h"
#include "elastic/process.h"

int main(int argc, char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) {
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    execv("/proc/self/exe", argv);  // on failure, carry on with the default policy
  }
  // The coordinator's measure of how long this binary takes to start (an agent's allowance).
  bw::elastic::note_main_entered();
  return bw::cli::run_app(argc, argv);
}
