#include "runtime/fault_points.h"

#include <utility>

namespace bw::runtime {
namespace {
FaultHook& hook() {
  static FaultHook h;
  return h;
}
}  // namespace

FaultHook set_fault_hook(FaultHook h) { return std::exchange(hook(), std::move(h)); }

void fault_point(const char* point) {
  if (hook()) hook()(point);
}

}  // namespace bw::runtime
