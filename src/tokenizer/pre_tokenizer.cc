#include "tokenizer/pre_tokenizer.h"

#include <algorithm>

namespace bw::tokenizer {

PreTokenizer::PreTokenizer(std::vector<Step> steps) : steps_(std::move(steps)) {}

PreTokenizer::Scratch::Scratch(const PreTokenizer& p) {
  for (const Step& step : p.steps_)
    match_.push_back(step.regex ? std::make_unique<MatchScratch>(*step.regex) : nullptr);
  pieces_.resize(p.steps_.size());
  prefixed_.resize(p.steps_.size());
}

void PreTokenizer::split(const Step& step, std::string_view text, Scratch& s,
                         std::vector<Scratch::Piece>& out) const {
  // The pattern's matches and the gaps between them, covering the text (pattern.rs).
  std::vector<Scratch::Piece> all;
  size_t prev = 0;
  step.regex->for_each_match(text, *s.match_[&step - steps_.data()], [&](size_t a, size_t b) {
    if (prev < a) all.push_back({prev, a, false});
    all.push_back({a, b, true});
    prev = b;
  });
  if (prev < text.size()) all.push_back({prev, text.size(), false});
  if (step.invert)
    for (auto& p : all) p.is_match = !p.is_match;

  out.clear();
  bool previous = false;
  switch (step.behavior) {
    case SplitBehavior::kIsolated:
      out = all;
      break;
    case SplitBehavior::kRemoved:
      for (const auto& p : all)
        if (!p.is_match) out.push_back(p);
      break;
    case SplitBehavior::kContiguous:
      for (const auto& p : all) {
        if (p.is_match == previous && !out.empty()) {
          out.back().end = p.end;
        } else {
          out.push_back(p);
        }
        previous = p.is_match;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const auto& p : all) {
        if (p.is_match && !previous && !out.empty()) {
          out.back().end = p.end;
        } else {
          out.push_back(p);
        }
        previous = p.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = all.rbegin(); it != all.rend(); ++it) {
        if (it->is_match && !previous && !out.empty()) {
          out.back().start = it->start;
        } else {
          out.push_back(*it);
        }
        previous = it->is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
  }
  std::erase_if(out, [](const Scratch::Piece& p) { return p.start == p.end; });
}

}  // namespace bw::tokenizer
