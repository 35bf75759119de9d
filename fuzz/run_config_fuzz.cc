// The TOML run config and its `section.key=value` overrides (runtime/config.h): input = the
// TOML text, then one override per "%%"-separated part. A config that parses must print back
// (to_toml) to TOML that parses to an equal config.
#include <cstdlib>
#include <optional>

#include "fuzz/fuzz_util.h"
#include "runtime/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parts = bw::fuzz::parts(bw::fuzz::text(data, size));
  std::vector<std::string> overrides;
  for (size_t i = 1; i < parts.size(); ++i) {
    std::string o = parts[i];
    if (!o.empty() && o.back() == '\n') o.pop_back();
    overrides.push_back(o);
  }
  std::optional<bw::runtime::RunConfig> config;
  try {
    config = bw::runtime::parse_run_config(parts[0], "fuzz.toml", overrides);
  } catch (const bw::ConfigError&) {
  }
  if (config) {
    // Outside the try: the saved config.toml of a valid config must load (a resume reads it).
    const auto again =
        bw::runtime::parse_run_config(bw::runtime::to_toml(*config, true), "printed", {});
    if (!(again == *config)) std::abort();  // to_toml lost or changed a value
    (void)bw::runtime::changed_keys(*config);
  }
  // The command-line form: arguments as `train` collects them.
  std::vector<std::string> args;
  for (size_t i = 1; i < parts.size(); ++i) args.push_back("--" + parts[i]);
  BW_FUZZ_EXPECT_CONFIG_ERRORS((void)bw::runtime::overrides_from_args(args));
  return 0;
}
