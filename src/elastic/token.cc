#include "elastic/token.h"

#include <fmt/format.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstdlib>
#include <random>

#include "core/error.h"

namespace bw::elastic {

std::string coordinator_token(const runtime::RunConfig& config, bool required) {
  const char* env = std::getenv("BW_RUN_TOKEN");
  const std::string from_env = env ? env : "";
  const std::string& from_config = config.elastic.run_token;
  if (!from_env.empty() && !from_config.empty() && from_env != from_config) {
    throw ConfigError(
        "elastic.run_token and BW_RUN_TOKEN are both set and differ; set one of them");
  }
  std::string token = from_config.empty() ? from_env : from_config;
  if (required && token.empty()) {
    throw ConfigError(
        "a coordinator that listens for agents on other hosts needs a run token: set "
        "BW_RUN_TOKEN (for the coordinator and every agent) or elastic.run_token");
  }
  return token;
}

std::string agent_token() {
  const char* env = std::getenv("BW_RUN_TOKEN");
  return env ? env : "";
}

std::string token_proof(const std::string& token, const std::string& nonce, int registration) {
  const std::string message = fmt::format("{}/{}", nonce, registration);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), digest, &len);
  std::string out;
  for (unsigned int i = 0; i < len; ++i) out += fmt::format("{:02x}", digest[i]);
  return out;
}

std::string sha256_hex(const std::string& bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest, &len, EVP_sha256(), nullptr) != 1) {
    throw InternalError("SHA-256 failed (OpenSSL's EVP_Digest)");
  }
  std::string out;
  for (unsigned int i = 0; i < len; ++i) out += fmt::format("{:02x}", digest[i]);
  return out;
}

std::string random_hex(int bytes) {
  std::random_device rd;  // /dev/urandom on Linux
  std::string out;
  for (int i = 0; i < bytes; ++i) out += fmt::format("{:02x}", rd() & 0xff);
  return out;
}

bool same_secret(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace bw::elastic
