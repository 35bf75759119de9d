// load_run_config (see config.h): the config file, then the checks of a run's files (out_dir,
// the resume checkpoint). Kept apart from the pure parser in config.cc.
#include "core/file_io.h"
#include "runtime/checkpointing.h"
#include "runtime/config.h"
#include "runtime/out_dir_lock.h"
#include "runtime/resume_check.h"

namespace bw::runtime {

RunConfig load_run_config(const std::string& toml_path_or_empty,
                          const std::vector<std::string>& overrides) {
  std::string text;
  if (!toml_path_or_empty.empty()) {
    text = io::read_file(toml_path_or_empty, io::kMaxConfigBytes, "config file");
  }
  RunConfig config = parse_run_config(
      text, toml_path_or_empty.empty() ? "defaults" : toml_path_or_empty, overrides);
  check_out_dir_usable(config.train.out_dir);
  if (!config.checkpoint.dir.empty()) check_out_dir_usable(config.checkpoint.dir, "checkpoint.dir");
  if (!config.train.resume.empty()) {
    check_resume(config, read_checkpoint_info(config.train.resume), config.train.resume);
  }
  return config;
}

}  // namespace bw::runtime
