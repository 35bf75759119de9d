#include "core/check.h"

namespace bw::detail {

void check_failed(const char* file, int line, const char* cond, const std::string& message) {
  throw InternalError(fmt::format("{}:{}: check failed: {}: {}", file, line, cond, message));
}

}  // namespace bw::detail
