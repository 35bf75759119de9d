#include "schedule/schedule.h"

namespace bw::schedule {

std::vector<int> Schedule::chunks_of(int device) const {
  std::vector<int> out;
  for (int c = 0; c < num_chunks; ++c)
    if (chunk_device[c] == device) out.push_back(c);
  return out;
}

}  // namespace bw::schedule
