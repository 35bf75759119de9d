#include "model/placement.h"

#include <ATen/autocast_mode.h>
#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "core/error.h"

namespace bw::model {

Placement Placement::cpu(Precision precision) { return on(torch::kCPU, precision); }

Placement Placement::on(torch::Device device, Precision precision) {
  Placement p;
  p.device = device;
  p.precision = precision;
  p.compute_dtype = precision == Precision::kBf16 ? torch::kBFloat16 : torch::kFloat;
  return p;
}

int64_t Placement::activation_element_bytes() const {
  return static_cast<int64_t>(c10::elementSize(compute_dtype));
}

bool cpu_has_native_bf16() {
  static const bool has = [] {
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("flags", 0) != 0) continue;
      std::istringstream words(line);
      for (std::string w; words >> w;) {
        if (w == "avx512_bf16" || w == "amx_bf16") return true;
      }
      return false;
    }
    return false;
  }();
  return has;
}

AutocastGuard::AutocastGuard(const Placement& placement) {
  if (!placement.mixed()) return;
  active_ = true;
  device_type_ = placement.device.type();
  prev_enabled_ = at::autocast::is_autocast_enabled(device_type_);
  prev_dtype_ = at::autocast::get_autocast_dtype(device_type_);
  at::autocast::set_autocast_enabled(device_type_, true);
  at::autocast::set_autocast_dtype(device_type_, placement.compute_dtype);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(device_type_, prev_enabled_);
  at::autocast::set_autocast_dtype(device_type_, prev_dtype_);
}

}  // namespace bw::model
