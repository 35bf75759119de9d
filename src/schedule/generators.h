// Internal: one generator per schedule kind (one .cc each), dispatched by generate.cc.
//
// Every generator returns a compute-only schedule with its placement; arguments are already
// checked by check_spec(). Orders are exact functions of (P, B, ...), never of costs.
#pragma once

#include <string>
#include <vector>

#include "schedule/schedule.h"

namespace bw::schedule::detail {

// A schedule with `num_chunks` chunks placed by `placement`, empty lists, and room reserved.
Schedule empty_schedule(std::string kind, int devices, int microbatches,
                        std::vector<int> placement);

Schedule make_gpipe(int devices, int microbatches);
Schedule make_1f1b(int devices, int microbatches);
Schedule make_interleaved(int devices, int microbatches, int chunks_per_device, int group_size);
Schedule make_chimera(int devices, int microbatches);
Schedule make_hanayo(int devices, int microbatches, int waves);
Schedule make_zb_h1(int devices, int microbatches);
Schedule make_zb_v(int devices, int microbatches);

// Placements.
std::vector<int> loop_placement(int devices, int chunks);  // chunk c on c mod P
std::vector<int> wave_placement(int devices, int chunks);  // Hanayo / V: turns back every P
}  // namespace bw::schedule::detail
