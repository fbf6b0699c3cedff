// In-process parity checks the family model tests share: allclose against a Diffusers
// recording with the case's tolerance, and the forward -> loss -> named gradients check of a
// denoiser against a `model` case (case.json, inputs.safetensors, expected.safetensors).
// Header-only (LibTorch and io/tensors.hpp of the test target). Helpers that ASSERT are void;
// wrap them in ASSERT_NO_FATAL_FAILURE where the test must stop.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "io/tensors.hpp"

namespace yeto::test {

// allclose(actual, expected, rtol, atol) with the tolerance object {"atol", "rtol"} of `key`:
// prints "  <key> max abs err E (atol A, rtol R)" (key padded to `width`) and expects every
// element within atol + rtol * |expected|.
inline void expect_close(const at::Tensor& actual, const at::Tensor& expected, const nlohmann::json& tol,
                         const std::string& key, int width = 58) {
  ASSERT_EQ(actual.sizes(), expected.sizes()) << key;
  const double rtol = tol.at("rtol").get<double>(), atol = tol.at("atol").get<double>();
  const auto a = actual.detach().to(at::kDouble), e = expected.to(at::kDouble);
  const auto err = (a - e).abs();
  const double worst = (err - (atol + rtol * e.abs())).max().item<double>();
  std::printf("  %-*s max abs err %.3g (atol %.3g, rtol %.3g)\n", width, key.c_str(), err.max().item<double>(), atol,
              rtol);
  EXPECT_LE(worst, 0.0) << key << ": max abs error " << err.max().item<double>() << " (atol " << atol << ", rtol "
                        << rtol << ")";
}

// A recorded case directory: case.json, inputs.safetensors, expected.safetensors.
struct ParityCase {
  nlohmann::json info;
  std::map<std::string, at::Tensor> inputs, expected;
};
inline ParityCase load_parity_case(const std::filesystem::path& dir) {
  ParityCase c;
  std::ifstream in(dir / "case.json");
  c.info = nlohmann::json::parse(in);
  c.inputs = io::load_safetensors(dir / "inputs.safetensors");
  c.expected = io::load_safetensors(dir / "expected.safetensors");
  return c;
}

// The `model` case check of a denoiser: forward() without autograd against "sample"; then, with
// `model`'s gradients cleared, the MSE of forward() against "loss_target" against "loss", backward,
// and each backward.grad_keys entry (recording -> parameter name) against its recorded gradient.
// Every key is printed as "<label> <key>"; the number of gradients compared goes to *checked.
inline void expect_forward_loss_and_grads(torch::nn::Module& model, const std::function<at::Tensor()>& forward,
                                          const ParityCase& c, const std::string& label, std::size_t* checked,
                                          int width = 58) {
  const auto& compare = c.info.at("compare");
  {
    torch::NoGradGuard ng;
    expect_close(forward(), c.expected.at("sample"), compare.at("sample"), label + " sample", width);
  }
  for (auto& p : model.parameters()) p.mutable_grad() = at::Tensor();
  const auto loss = (forward() - c.expected.at("loss_target")).pow(2).mean();
  expect_close(loss, c.expected.at("loss"), compare.at("loss"), label + " loss", width);
  loss.backward();
  const auto params = model.named_parameters();
  *checked = 0;
  for (const auto& [grad_key, param_name] : c.info.at("backward").at("grad_keys").items()) {
    const auto* p = params.find(param_name.get<std::string>());
    ASSERT_NE(p, nullptr) << "no parameter " << param_name;
    ASSERT_TRUE(p->grad().defined()) << param_name;
    expect_close(p->grad(), c.expected.at(grad_key), compare.at(grad_key), label + " " + grad_key, width);
    ++*checked;
  }
}

}  // namespace yeto::test
