// Text values in a c10d store (the TCPStore the coordinator hosts): the one place the elastic
// layer turns a key's bytes into a string and back, for the coordinator, its supervisor, the
// agents and the workers. A store call that fails throws c10d's error, which callers treat as a
// lost coordinator (exit 3).
//
// Thread-safety: as the store's (one client per thread, or a client c10d serializes).
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace bw::elastic {

inline std::string get_string(c10d::Store& store, const std::string& key) {
  const auto bytes = store.get(key);
  return std::string(bytes.begin(), bytes.end());
}

inline void set_string(c10d::Store& store, const std::string& key, const std::string& value) {
  store.set(key, std::vector<uint8_t>(value.begin(), value.end()));
}

}  // namespace bw::elastic
