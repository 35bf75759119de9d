// The run token of a multi-host run (docs/multihost.md "Security"): a shared secret that an
// agent must prove it knows before the coordinator gives it a node. The agent never writes the
// token itself to the store: it writes HMAC-SHA256(token, nonce "/" registration), where the nonce
// is random per run, so reading the store does not reveal the token and a proof is good for one
// registration only. The store itself has no authentication (see the threat model in the doc).
//
// Thread-safety: free functions without shared state.
#pragma once

#include <string>

#include "runtime/config.h"

namespace bw::elastic {

// The token of a coordinator: elastic.run_token, or BW_RUN_TOKEN when that is empty. ConfigError
// when both are set and differ, or when `required` and neither is set.
std::string coordinator_token(const runtime::RunConfig& config, bool required);

// The token of an agent: BW_RUN_TOKEN (empty when unset).
std::string agent_token();

// Lower-case hex of HMAC-SHA256(key = token, message = nonce + "/" + registration).
std::string token_proof(const std::string& token, const std::string& nonce, int registration);

// Lower-case hex of SHA-256(bytes).
std::string sha256_hex(const std::string& bytes);

// `bytes` random bytes from the system's generator, as hex.
std::string random_hex(int bytes);

// Constant-time comparison of two strings of the same length (false when lengths differ).
bool same_secret(const std::string& a, const std::string& b);

}  // namespace bw::elastic
