// See ../README.md: the Gloo context is held by pointer only (ProcessGroupGloo's members); the
// member named here is called by an inline virtual of ProcessGroupGloo, emitted in LibTorch.
#pragma once

#include <chrono>

namespace gloo {
class Context {
 public:
  void setTimeout(std::chrono::milliseconds timeout);
};
}  // namespace gloo
