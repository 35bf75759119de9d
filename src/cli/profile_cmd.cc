// `breakwater profile`: layer profiles. `profile synth` writes an analytic profile for a known
// model and device (plan/synth.h); `profile measure` (LibTorch) is added from its own file.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <memory>

#include "cli/checks.h"
#include "cli/registry.h"
#include "plan/synth.h"

namespace bw::cli {
namespace {

struct SynthArgs {
  std::string model;
  std::string device = "a100";
  int microbatch_size = 1;
  std::string output;
};

void synth(const SynthArgs& a) {
  plan::Profile p = plan::synthesize_profile(plan::find_model(a.model), plan::find_device(a.device),
                                             a.microbatch_size);
  if (a.output.empty() || a.output == "-") {
    fmt::print("{}\n", plan::to_json(p).dump(2));
  } else {
    plan::save_profile(a.output, p);
    double params = 0, ms = 0;
    for (const auto& l : p.layers) params += l.param_bytes, ms += l.forward_ms + l.backward_ms;
    fmt::print(
        "wrote {}: {} layers, {:.2f} GB of parameters, {:.1f} ms forward+backward per "
        "microbatch on one {}\n",
        a.output, p.num_layers(), params / 1e9, ms, a.device);
  }
}

void add(CLI::App& app) {
  CLI::App* profile = app.add_subcommand("profile", "Layer profiles: synthesize or measure");
  profile->require_subcommand(1);
  auto args = std::make_shared<SynthArgs>();
  std::vector<std::string> models, devices;
  for (const auto& m : plan::known_models()) models.push_back(m.name);
  for (const auto& d : plan::known_devices()) devices.push_back(d.name);
  CLI::App* s = profile->add_subcommand(
      "synth", "Analytic profile of a known model on a known device (docs/profiles.md)");
  s->add_option("--model", args->model, fmt::format("one of: {}", fmt::join(models, ", ")))
      ->required();
  s->add_option("--device", args->device, fmt::format("one of: {}", fmt::join(devices, ", ")))
      ->capture_default_str();
  s->add_option("--microbatch-size", args->microbatch_size, "samples per microbatch")
      ->capture_default_str();
  s->add_option("--output,-o", args->output, "output JSON path (default: stdout)");
  s->callback([s, args] {
    reject_nan_values(*s);
    require_count(args->microbatch_size, 1, 1 << 20, "--microbatch-size");
    synth(*args);
  });
}

Registrar registrar("profile", 10, add);

}  // namespace
}  // namespace bw::cli
