// Optimizer: the AdamW + warm-up/cosine + clipping update equals a closed-form AdamW written out
// here in double precision, for several steps over tensors of several shapes; the LR schedule
// matches its formula at the points where it has known values; a restored state continues
// bitwise; the gradient norm's sum of squares matches a long-double sum on any thread count.
#include "runtime/optimizer.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <torch/torch.h>

#include "core/error.h"

namespace bw::runtime {
namespace {

TrainConfig train_config(int steps, int warmup, double wd, double clip) {
  TrainConfig c;
  c.steps = steps;
  c.warmup_steps = warmup;
  c.lr = 1e-2;
  c.min_lr = 1e-3;
  c.weight_decay = wd;
  c.beta1 = 0.9;
  c.beta2 = 0.95;
  c.grad_clip = clip;
  return c;
}

TEST(LrSchedule, MatchesKnownPoints) {
  for (int warmup : {0, 1, 4}) {
    TrainConfig c = train_config(20, warmup, 0.1, 1.0);
    if (warmup > 0) {
      EXPECT_DOUBLE_EQ(lr_at(0, c), c.lr / warmup);
      EXPECT_DOUBLE_EQ(lr_at(warmup - 1, c), c.lr);
    }
    EXPECT_DOUBLE_EQ(lr_at(warmup, c), c.lr);  // cosine starts at the peak
    int mid2 = c.steps + warmup;               // progress 1/2 at step (steps + warmup) / 2
    if (mid2 % 2 == 0) EXPECT_NEAR(lr_at(mid2 / 2, c), (c.lr + c.min_lr) / 2, 1e-15);
    EXPECT_DOUBLE_EQ(lr_at(c.steps, c), c.min_lr);
    EXPECT_DOUBLE_EQ(lr_at(c.steps + 100, c), c.min_lr);
    for (int s = warmup; s + 1 < c.steps; ++s) {
      EXPECT_GE(lr_at(s, c), lr_at(s + 1, c)) << "not decaying at step " << s;
      EXPECT_GE(lr_at(s, c), c.min_lr);
    }
  }
}

TEST(ClipScale, ClosedForm) {
  EXPECT_EQ(clip_scale(0.25, 1.0), 1.0);  // norm 0.5
  EXPECT_EQ(clip_scale(1.0, 0.0), 1.0);   // no clipping
  EXPECT_EQ(clip_scale(1e12, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(clip_scale(16.0, 1.0), 1.0 / (4.0 + 1e-6));
  EXPECT_DOUBLE_EQ(clip_scale(9.0, 2.0), 2.0 / (3.0 + 1e-6));
}

TEST(GradSqNorm, SumsSquaresOfDefinedGrads) {
  auto a = torch::zeros({2, 2}, torch::requires_grad());
  auto b = torch::zeros({3}, torch::requires_grad());
  auto c = torch::zeros({1}, torch::requires_grad());  // no grad: counts 0
  a.mutable_grad() = torch::tensor({1.0f, 2.0f, 3.0f, 4.0f}).reshape({2, 2});
  b.mutable_grad() = torch::tensor({0.5f, -0.5f, 2.0f});
  EXPECT_DOUBLE_EQ(grad_sq_norm({a, b, c}), 1 + 4 + 9 + 16 + 0.25 + 0.25 + 4);
}

// sum_of_squares against a sum in long double of the exact squares, over sizes around its
// 16-lane groups and 65,536-element blocks, values spanning 12 decades; the same bits on 1 and 3
// threads; and non-contiguous, bf16 and fp64 tensors through the generic path.
TEST(SumOfSquares, MatchesLongDoubleAnyThreadCount) {
  torch::manual_seed(3);
  const int threads = at::get_num_threads();
  for (int64_t n : {0, 1, 15, 16, 17, 1000, 65535, 65536, 65537, 3 * 65536 + 5}) {
    auto t = torch::randn({n}) * torch::pow(10.0, torch::randint(-6, 6, {n}).to(torch::kFloat));
    const float* p = t.const_data_ptr<float>();
    long double ref = 0;
    for (int64_t i = 0; i < n; ++i) ref += static_cast<long double>(p[i]) * p[i];
    at::set_num_threads(1);
    const double one = sum_of_squares(t);
    at::set_num_threads(3);
    const double three = sum_of_squares(t);
    at::set_num_threads(threads);
    EXPECT_EQ(one, three) << "n " << n;
    EXPECT_NEAR(one, static_cast<double>(ref), 1e-13 * static_cast<double>(ref)) << "n " << n;
  }
  auto m = torch::randn({300, 70});
  const double whole = sum_of_squares(m);
  EXPECT_NEAR(sum_of_squares(m.t()), whole, 1e-13 * whole);  // transposed: generic path
  EXPECT_NEAR(sum_of_squares(m.to(torch::kFloat64)), whole, 1e-13 * whole);
  auto b = m.to(torch::kBFloat16);
  EXPECT_NEAR(sum_of_squares(b), b.to(torch::kFloat64).pow(2).sum().item<double>(), 1e-13 * whole);
}

// The reference: plain AdamW (Loshchilov & Hutter, Algorithm 2 with decoupled decay scaled by
// the learning rate, as PyTorch defines it) in double precision, one scalar at a time.
struct RefParam {
  std::vector<double> p, m, v;
  bool decay;
};

torch::Tensor grad_for(const torch::Tensor& p, int step, int which, double magnitude) {
  auto idx = torch::arange(p.numel(), torch::kFloat64).reshape(p.sizes());
  return (magnitude * torch::sin(idx * 0.7 + step * 1.3 + which)).to(torch::kFloat32);
}

std::vector<double> values(const torch::Tensor& t) {
  auto c = t.detach().to(torch::kFloat64).contiguous().reshape({-1});
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

TEST(Optimizer, MatchesClosedFormAdamWWithScheduleAndClipping) {
  struct Case {
    int steps, warmup;
    double wd, clip, grad_magnitude;
  };
  std::vector<std::vector<int64_t>> shapes = {{3, 4}, {5}, {2, 3, 2}, {1}};
  for (const Case& k : std::vector<Case>{{6, 2, 0.1, 1.0, 0.5},       // clipping active
                                         {6, 0, 0.0, 0.0, 0.5},       // no clipping, no decay
                                         {8, 3, 0.3, 100.0, 2.0}}) {  // clip never triggers
    TrainConfig c = train_config(k.steps, k.warmup, k.wd, k.clip);
    std::vector<std::pair<std::string, torch::Tensor>> params;
    std::vector<RefParam> ref;
    for (size_t i = 0; i < shapes.size(); ++i) {
      auto p = torch::randn(shapes[i], torch::TensorOptions().dtype(torch::kFloat32));
      p = (p * 0.5).set_requires_grad(true);
      params.emplace_back(fmt::format("p{}", i), p);
      std::vector<double> pv = values(p);
      ref.push_back({pv, std::vector<double>(pv.size(), 0), std::vector<double>(pv.size(), 0),
                     shapes[i].size() >= 2});
    }
    Optimizer opt(params, c);
    for (int step = 0; step < k.steps; ++step) {
      opt.zero_grad();
      std::vector<torch::Tensor> tensors;
      for (size_t i = 0; i < params.size(); ++i) {
        auto& p = params[i].second;
        p.mutable_grad() = grad_for(p, step, static_cast<int>(i), k.grad_magnitude);
        tensors.push_back(p);
      }
      double scale = clip_scale(grad_sq_norm(tensors), c.grad_clip);
      double lr = opt.step(step, scale);
      // Reference update.
      double ref_sq = 0;
      std::vector<std::vector<double>> g(params.size());
      for (size_t i = 0; i < params.size(); ++i) {
        g[i] = values(grad_for(params[i].second, step, static_cast<int>(i), k.grad_magnitude));
        for (double x : g[i]) ref_sq += x * x;
      }
      double norm = std::sqrt(ref_sq);
      double ref_scale = (c.grad_clip > 0 && norm > c.grad_clip) ? c.grad_clip / (norm + 1e-6) : 1;
      double ref_lr =
          step < c.warmup_steps
              ? c.lr * (step + 1) / c.warmup_steps
              : c.min_lr + 0.5 * (c.lr - c.min_lr) *
                               (1 + std::cos(std::numbers::pi * (step - c.warmup_steps) /
                                             (c.steps - c.warmup_steps)));
      ASSERT_NEAR(lr, ref_lr, 1e-15) << "step " << step;
      int t = step + 1;
      for (size_t i = 0; i < params.size(); ++i) {
        RefParam& r = ref[i];
        double wd = r.decay ? c.weight_decay : 0.0;
        for (size_t j = 0; j < r.p.size(); ++j) {
          double gj = g[i][j] * ref_scale;
          r.m[j] = c.beta1 * r.m[j] + (1 - c.beta1) * gj;
          r.v[j] = c.beta2 * r.v[j] + (1 - c.beta2) * gj * gj;
          double mhat = r.m[j] / (1 - std::pow(c.beta1, t));
          double vhat = r.v[j] / (1 - std::pow(c.beta2, t));
          r.p[j] = r.p[j] * (1 - ref_lr * wd) - ref_lr * mhat / (std::sqrt(vhat) + kAdamEps);
        }
        std::vector<double> got = values(params[i].second);
        int mismatches = 0;
        for (size_t j = 0; j < got.size(); ++j) {
          double tol = 1e-6 + 1e-5 * std::abs(r.p[j]);
          if (std::abs(got[j] - r.p[j]) > tol && mismatches++ < 5) {
            ADD_FAILURE() << "step " << step << " param p" << i << "[" << j << "]: got " << got[j]
                          << " expected " << r.p[j] << " (clip scale " << ref_scale << ")";
          }
        }
        ASSERT_EQ(mismatches, 0);
      }
      if (k.clip == 1.0 && step == 0) EXPECT_LT(ref_scale, 1.0) << "the case must clip";
    }
  }
}

std::vector<std::pair<std::string, torch::Tensor>> make_params(uint64_t seed) {
  torch::manual_seed(seed);
  return {{"layers.0.w", torch::randn({4, 3}).set_requires_grad(true)},
          {"layers.0.b", torch::randn({3}).set_requires_grad(true)},
          {"layers.1.w", torch::randn({3, 3}).set_requires_grad(true)}};
}

void run_steps(Optimizer& opt, std::vector<std::pair<std::string, torch::Tensor>>& params,
               int first, int count) {
  for (int s = first; s < first + count; ++s) {
    opt.zero_grad();
    std::vector<torch::Tensor> ts;
    for (size_t i = 0; i < params.size(); ++i) {
      params[i].second.mutable_grad() = grad_for(params[i].second, s, static_cast<int>(i), 3.0);
      ts.push_back(params[i].second);
    }
    opt.step(s, clip_scale(grad_sq_norm(ts), 1.0));
  }
}

std::vector<std::pair<std::string, torch::Tensor>> clone_params(
    const std::vector<std::pair<std::string, torch::Tensor>>& params) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& [n, p] : params) out.emplace_back(n, p.detach().clone().set_requires_grad(true));
  return out;
}

TEST(Optimizer, RestoredStateContinuesBitwise) {
  for (bool through_tensors : {false, true}) {
    TrainConfig c = train_config(10, 2, 0.1, 1.0);
    auto a_params = make_params(7);
    Optimizer a(a_params, c);
    run_steps(a, a_params, 0, 3);
    auto b_params = clone_params(a_params);
    Optimizer b(b_params, c);
    if (through_tensors) {
      auto flat = a.state_tensors();
      ASSERT_EQ(flat.size(), 9u);
      b.load_state_tensors(std::map<std::string, torch::Tensor>(flat.begin(), flat.end()));
    } else {
      b.set_state(a.get_state());
    }
    auto sa = a.get_state(), sb = b.get_state();
    ASSERT_EQ(sa.size(), 3u);
    for (const auto& [name, s] : sa) {
      EXPECT_EQ(s.step, 3) << name;
      EXPECT_TRUE(torch::equal(s.exp_avg, sb.at(name).exp_avg)) << name;
      EXPECT_TRUE(torch::equal(s.exp_avg_sq, sb.at(name).exp_avg_sq)) << name;
    }
    run_steps(a, a_params, 3, 4);
    run_steps(b, b_params, 3, 4);
    for (size_t i = 0; i < a_params.size(); ++i) {
      EXPECT_TRUE(torch::equal(a_params[i].second, b_params[i].second))
          << a_params[i].first << " differs after resume; max diff "
          << (a_params[i].second - b_params[i].second).abs().max().item<double>();
    }
    // The state is a copy: a fresh optimizer without it diverges from a.
    auto c_params = clone_params(b_params);
    Optimizer fresh(c_params, c);
    run_steps(fresh, c_params, 7, 1);
    run_steps(a, a_params, 7, 1);
    EXPECT_FALSE(torch::equal(a_params[0].second, c_params[0].second));
  }
}

TEST(Optimizer, BadStateIsConfigError) {
  auto params = make_params(1);
  Optimizer opt(params, train_config(10, 2, 0.1, 1.0));
  std::map<std::string, ParamState> unknown = {
      {"layers.9.w", ParamState{torch::zeros({4, 3}), torch::zeros({4, 3}), 1}}};
  EXPECT_THROW(opt.set_state(unknown), ConfigError);
  std::map<std::string, ParamState> shape = {
      {"layers.0.w", ParamState{torch::zeros({3, 4}), torch::zeros({3, 4}), 1}}};
  try {
    opt.set_state(shape);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("[3, 4]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[4, 3]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(opt.load_state_tensors({}), ConfigError);
}

}  // namespace
}  // namespace bw::runtime
