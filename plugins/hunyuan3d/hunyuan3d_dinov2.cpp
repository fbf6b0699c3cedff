#include "hunyuan3d_dinov2.hpp"

#include <cmath>
#include <stdexcept>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "yeto/family/config.hpp"

namespace yeto::hunyuan3d {

std::int64_t Dinov2Config::mlp_hidden() const {
  const auto plain = static_cast<std::int64_t>(static_cast<double>(hidden_size) * mlp_ratio);
  if (!use_swiglu_ffn) return plain;
  return (static_cast<std::int64_t>(static_cast<double>(plain) * 2.0 / 3.0) + 7) / 8 * 8;
}

Dinov2Config Dinov2Config::from_json(const nlohmann::json& j) {
  const family::ConfigReader in(j, "Dinov2Model config");
  Dinov2Config c;
  c.hidden_size = in.integer("hidden_size", c.hidden_size);
  c.num_hidden_layers = in.integer("num_hidden_layers", c.num_hidden_layers);
  c.num_attention_heads = in.integer("num_attention_heads", c.num_attention_heads);
  c.mlp_ratio = in.number("mlp_ratio", c.mlp_ratio);
  c.patch_size = in.integer("patch_size", c.patch_size);
  c.image_size = in.integer("image_size", c.image_size);
  c.num_channels = in.integer("num_channels", c.num_channels);
  c.layer_norm_eps = in.number("layer_norm_eps", c.layer_norm_eps);
  c.qkv_bias = in.boolean("qkv_bias", c.qkv_bias);
  c.layerscale_value = in.number("layerscale_value", c.layerscale_value);
  c.use_swiglu_ffn = in.boolean("use_swiglu_ffn", c.use_swiglu_ffn);
  for (const char* k : {"hidden_size", "num_attention_heads", "patch_size", "image_size", "num_channels"})
    if (in.integer(k, 1) <= 0) in.fail(k, "must be positive");
  if (c.num_hidden_layers < 0) in.fail("num_hidden_layers", "must not be negative");
  if (!(c.mlp_ratio > 0)) in.fail("mlp_ratio", "must be positive");
  if (c.hidden_size % c.num_attention_heads != 0) in.fail("hidden_size", "is not a multiple of 'num_attention_heads'");
  if (c.image_size < c.patch_size) in.fail("image_size", "is smaller than 'patch_size'");
  if (in.string("hidden_act", "gelu") != "gelu")
    in.fail("hidden_act", "must be gelu (the exact GELU of Hunyuan3D-2.1's DINOv2)");
  return c;
}

namespace {

torch::nn::Module& child(torch::nn::Module& parent, const std::string& name) {
  return *parent.register_module(name, std::make_shared<torch::nn::Module>());
}

torch::nn::LayerNorm layer_norm(std::int64_t dim, double eps) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim}).eps(eps));
}

}  // namespace

Dinov2LayerImpl::Dinov2LayerImpl(const Dinov2Config& c)
    : heads(c.num_attention_heads), head_dim(c.hidden_size / c.num_attention_heads), swiglu(c.use_swiglu_ffn) {
  const auto d = c.hidden_size;
  norm1 = register_module("norm1", layer_norm(d, c.layer_norm_eps));
  auto& attention = child(*this, "attention");
  auto& self = child(attention, "attention");
  query = self.register_module("query", torch::nn::Linear(torch::nn::LinearOptions(d, d).bias(c.qkv_bias)));
  key = self.register_module("key", torch::nn::Linear(torch::nn::LinearOptions(d, d).bias(c.qkv_bias)));
  value = self.register_module("value", torch::nn::Linear(torch::nn::LinearOptions(d, d).bias(c.qkv_bias)));
  dense = child(attention, "output").register_module("dense", torch::nn::Linear(d, d));
  lambda1 = child(*this, "layer_scale1").register_parameter("lambda1", at::full({d}, c.layerscale_value));
  norm2 = register_module("norm2", layer_norm(d, c.layer_norm_eps));
  auto& mlp = child(*this, "mlp");
  const auto hidden = c.mlp_hidden();
  if (swiglu) {
    fc1 = mlp.register_module("weights_in", torch::nn::Linear(d, 2 * hidden));
    fc2 = mlp.register_module("weights_out", torch::nn::Linear(hidden, d));
  } else {
    fc1 = mlp.register_module("fc1", torch::nn::Linear(d, hidden));
    fc2 = mlp.register_module("fc2", torch::nn::Linear(hidden, d));
  }
  lambda2 = child(*this, "layer_scale2").register_parameter("lambda1", at::full({d}, c.layerscale_value));
}

at::Tensor Dinov2LayerImpl::forward(const at::Tensor& x) {
  const auto b = x.size(0), n = x.size(1);
  const auto h = norm1(x);
  auto split = [&](const at::Tensor& t) { return t.view({b, n, heads, head_dim}).transpose(1, 2); };
  const auto q = split(query(h)), k = split(key(h)), v = split(value(h));
  const auto weights = (at::matmul(q, k.transpose(-1, -2)) * (1.0 / std::sqrt(static_cast<double>(head_dim))))
                           .softmax(-1, at::kFloat)
                           .to(q.scalar_type());
  const auto attn = at::matmul(weights, v).transpose(1, 2).reshape({b, n, heads * head_dim});
  auto out = x + lambda1 * dense(attn);
  const auto m = norm2(out);
  at::Tensor ff;
  if (swiglu) {
    const auto halves = fc1(m).chunk(2, -1);
    ff = fc2(at::silu(halves[0]) * halves[1]);
  } else {
    ff = fc2(at::gelu(fc1(m)));
  }
  return out + lambda2 * ff;
}

Dinov2ModelImpl::Dinov2ModelImpl(const Dinov2Config& config) : config_(config) {
  const auto d = config.hidden_size, g = config.grid();
  auto& embeddings = child(*this, "embeddings");
  cls_token = embeddings.register_parameter("cls_token", at::zeros({1, 1, d}));
  mask_token = embeddings.register_parameter("mask_token", at::zeros({1, d}));
  position_embeddings = embeddings.register_parameter("position_embeddings", at::zeros({1, 1 + g * g, d}));
  projection = child(embeddings, "patch_embeddings")
                   .register_module("projection",
                                    torch::nn::Conv2d(torch::nn::Conv2dOptions(config.num_channels, d, config.patch_size)
                                                          .stride(config.patch_size)));
  layers = torch::nn::ModuleList();
  for (std::int64_t i = 0; i < config.num_hidden_layers; ++i) layers->push_back(Dinov2Layer(config));
  child(*this, "encoder").register_module("layer", layers);
  layernorm = register_module("layernorm", layer_norm(d, config.layer_norm_eps));
}

at::Tensor Dinov2ModelImpl::position_table(std::int64_t patches, std::int64_t height, std::int64_t width) const {
  const auto g = config_.grid(), d = config_.hidden_size, p = config_.patch_size;
  if (patches == g * g && height == width) return position_embeddings;
  const auto cls = position_embeddings.narrow(1, 0, 1);
  const auto grid = position_embeddings.narrow(1, 1, g * g).reshape({1, g, g, d}).permute({0, 3, 1, 2});
  const auto resized =
      at::upsample_bicubic2d(grid.to(at::kFloat), {height / p, width / p}, /*align_corners=*/false)
          .to(position_embeddings.scalar_type());
  return at::cat({cls, resized.permute({0, 2, 3, 1}).reshape({1, -1, d})}, 1);
}

Dinov2Output Dinov2ModelImpl::forward(const at::Tensor& pixel_values, const at::Tensor& bool_masked_pos) {
  if (pixel_values.dim() != 4 || pixel_values.size(1) != config_.num_channels)
    throw std::invalid_argument("Dinov2Model: pixel_values must be [B, " + std::to_string(config_.num_channels) +
                                ", H, W], got " + c10::str(pixel_values.sizes()));
  const auto height = pixel_values.size(2), width = pixel_values.size(3);
  if (height < config_.patch_size || width < config_.patch_size)
    throw std::invalid_argument("Dinov2Model: an image smaller than one patch (" + std::to_string(config_.patch_size) +
                                " pixels): " + c10::str(pixel_values.sizes()));
  const auto dtype = projection->weight.scalar_type();
  auto patches = projection(pixel_values.to(projection->weight.device(), dtype)).flatten(2).transpose(1, 2);
  const auto b = patches.size(0), n = patches.size(1);
  if (bool_masked_pos.defined()) {
    if (bool_masked_pos.dim() != 2 || bool_masked_pos.size(0) != b || bool_masked_pos.size(1) != n)
      throw std::invalid_argument("Dinov2Model: bool_masked_pos must be [" + std::to_string(b) + ", " +
                                  std::to_string(n) + "], got " + c10::str(bool_masked_pos.sizes()));
    patches = at::where(bool_masked_pos.to(patches.device(), at::kBool).unsqueeze(-1), mask_token.unsqueeze(0),
                        patches);
  }
  Dinov2Output out;
  out.position_table = position_table(n, height, width);
  auto h = at::cat({cls_token.expand({b, -1, -1}), patches}, 1) + out.position_table;
  out.hidden_states.push_back(h);
  for (const auto& layer : *layers) {
    h = layer->as<Dinov2Layer>()->forward(h);
    out.hidden_states.push_back(h);
  }
  out.last_hidden_state = layernorm(h);
  return out;
}

DinoImageEncoderConfig DinoImageEncoderConfig::from_json(const nlohmann::json& j) {
  const family::ConfigReader in(j, "DinoImageEncoder config");
  DinoImageEncoderConfig c;
  if (j.is_object() && j.contains("config")) {
    if (!j["config"].is_object()) in.fail("config", "must be the Dinov2Config object");
    c.model = Dinov2Config::from_json(j["config"]);
  }
  c.image_size = in.integer("image_size", c.image_size);
  c.use_cls_token = in.boolean("use_cls_token", c.use_cls_token);
  if (c.image_size < c.model.patch_size) in.fail("image_size", "is smaller than the model's patch_size");
  return c;
}

DinoImageEncoderImpl::DinoImageEncoderImpl(const DinoImageEncoderConfig& config) : config_(config) {
  model = register_module("model", Dinov2Model(config.model));
}

at::Tensor DinoImageEncoderImpl::forward(const at::Tensor& image) {
  const auto px = dino_preprocess(image.to(at::kCPU), config_.image_size).to(model->projection->weight.device());
  const auto tokens = model->forward(px).last_hidden_state;
  return config_.use_cls_token ? tokens : tokens.narrow(1, 1, tokens.size(1) - 1);
}

at::Tensor dino_preprocess(const at::Tensor& image, std::int64_t image_size, bool antialias, at::Tensor* resized) {
  if (image.dim() != 4 || image.size(1) != 3)
    throw std::invalid_argument("image must be [B, 3, H, W] in [-1, 1], got " + c10::str(image.sizes()));
  if (image_size < 1) throw std::invalid_argument("image_size must be positive");
  auto x = (image.to(at::kFloat) - (-1.0)) / (1.0 - (-1.0));
  const auto h = x.size(2), w = x.size(3);
  // torchvision Resize(int): the shorter edge to S, the longer to int(S * long / short).
  const auto shorter = std::min(h, w), longer = std::max(h, w);
  const auto new_long = static_cast<std::int64_t>(static_cast<double>(image_size) * static_cast<double>(longer) /
                                                  static_cast<double>(shorter));
  const std::int64_t nh = w <= h ? new_long : image_size, nw = w <= h ? image_size : new_long;
  if (nh != h || nw != w)
    x = antialias ? at::_upsample_bilinear2d_aa(x, {nh, nw}, /*align_corners=*/false)
                  : at::upsample_bilinear2d(x, {nh, nw}, /*align_corners=*/false);
  if (resized) *resized = x;
  if (nh < image_size || nw < image_size)
    throw std::invalid_argument("image of " + c10::str(image.sizes()) + " resizes below the crop");
  // CenterCrop: Python's round, ties to even (nearbyint in the default rounding mode).
  const auto top = static_cast<std::int64_t>(std::nearbyint(static_cast<double>(nh - image_size) / 2.0));
  const auto left = static_cast<std::int64_t>(std::nearbyint(static_cast<double>(nw - image_size) / 2.0));
  x = x.narrow(2, top, image_size).narrow(3, left, image_size);
  const auto mean = at::tensor(std::vector<float>{0.485f, 0.456f, 0.406f}).view({1, 3, 1, 1});
  const auto std = at::tensor(std::vector<float>{0.229f, 0.224f, 0.225f}).view({1, 3, 1, 1});
  return (x - mean.to(x.device())) / std.to(x.device());
}

}  // namespace yeto::hunyuan3d
