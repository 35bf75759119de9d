#include "runtime/gloo_backend.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <cstdlib>
#include <mutex>

namespace bw::runtime {

void disable_flight_recorder() {
  static std::once_flag once;
  std::call_once(once, [] { setenv("TORCH_FR_BUFFER_SIZE", "0", /*overwrite=*/0); });
}

c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int size,
                                                    std::chrono::milliseconds timeout,
                                                    const std::string& hostname) {
  disable_flight_recorder();
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(hostname));
  options->threads = 1;
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
}

}  // namespace bw::runtime
