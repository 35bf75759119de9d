// Skipping the seeded initialisation of layers whose every parameter is about to be overwritten
// (a Hugging Face import, a checkpoint loaded for generation or the end-of-run sample): drawing
// the normal samples of a Llama-3.2-1B-shaped model alone took seconds, and the layers then held
// a second copy of the weights for nothing.
//
// Thread-safety: the flag is per thread; a guard affects build_layer on its own thread only.
#pragma once

namespace bw::model {

// While alive, model::build_layer on this thread leaves the parameters it would draw from the
// seed uninitialised (torch::empty); constant ones (norm weights, zero biases) are still set.
// Only for layers whose every parameter is then copied from elsewhere.
class SkipInit {
 public:
  SkipInit();
  ~SkipInit();
  SkipInit(const SkipInit&) = delete;
  SkipInit& operator=(const SkipInit&) = delete;
  static bool active();

 private:
  bool previous_;
};

}  // namespace bw::model
