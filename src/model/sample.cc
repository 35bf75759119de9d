#include "model/sample.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>

#include "core/check.h"

namespace bw::model {

std::vector<int64_t> sample_tokens(const std::vector<std::shared_ptr<Layer>>& layers,
                                   const GptConfig& config, const std::vector<int64_t>& prompt,
                                   const SampleOptions& options) {
  BW_CHECK(!prompt.empty(), "sampling needs a prompt of at least one token");
  BW_CHECK(static_cast<int>(layers.size()) == num_layers(config), "{} layers for a {}-layer model",
           layers.size(), num_layers(config));
  torch::NoGradGuard no_grad;
  auto gen = at::detail::createCPUGenerator(options.seed);
  std::vector<int64_t> context = prompt, out;
  for (int i = 0; i < options.num_tokens; ++i) {
    const size_t n = std::min<size_t>(context.size(), config.seq_len);
    std::vector<int64_t> window(context.end() - n, context.end());
    torch::Tensor x = torch::tensor(window, torch::kInt64).unsqueeze(0);
    for (const auto& layer : layers) x = layer->forward(x);
    auto logits = x[0][static_cast<int64_t>(n) - 1] / std::max(options.temperature, 1e-6);
    const int k = std::min<int>(std::max(options.top_k, 1), config.vocab_size);
    auto [values, indices] = logits.topk(k);
    auto probs = at::softmax(values, -1);
    const int64_t pick = indices[probs.multinomial(1, false, gen).item<int64_t>()].item<int64_t>();
    context.push_back(pick);
    out.push_back(pick);
  }
  return out;
}

}  // namespace bw::model
