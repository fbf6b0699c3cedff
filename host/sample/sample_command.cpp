// `yeto-host sample`: text-to-image generation with a model's family plugin, written as PNG.
#include <ATen/ATen.h>

#include <charconv>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "core/error.hpp"
#include "pipeline/pipeline.hpp"
#include "plugin/instance.hpp"
#include "runtime/torch_runtime.hpp"
#include "sample/png.hpp"

namespace yeto::sample {
namespace {

template <class T>
T number(const cli::CommandContext& ctx, const std::string& option, T fallback, T min) {
  if (!ctx.has(option)) return fallback;
  const std::string v = ctx.value(option);
  T out{};
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || end != v.data() + v.size())
    throw UsageError("--" + option + ": '" + v + "' is not a number");
  if (out < min) throw UsageError("--" + option + ": must be at least " + std::to_string(min) + ", got " + v);
  return out;
}

double real(const cli::CommandContext& ctx, const std::string& option, double fallback) {
  if (!ctx.has(option)) return fallback;
  const std::string v = ctx.value(option);
  try {
    std::size_t used = 0;
    const double d = std::stod(v, &used);
    if (used != v.size()) throw std::invalid_argument(v);
    return d;
  } catch (const std::exception&) {
    throw UsageError("--" + option + ": '" + v + "' is not a number");
  }
}

// [3, H, W] in [0, 1] -> H*W*3 bytes, rounded as Diffusers' numpy_to_pil ((x * 255).round()).
std::vector<std::uint8_t> to_rgb8(const at::Tensor& image) {
  const auto bytes = (image.detach().to(at::kFloat).cpu().clamp(0, 1) * 255).round().to(at::kByte).permute({1, 2, 0})
                         .contiguous();
  const auto* p = bytes.data_ptr<std::uint8_t>();
  return std::vector<std::uint8_t>(p, p + bytes.numel());
}

int run_sample(cli::CommandContext& ctx) {
  if (ctx.has("adapter-dir"))
    throw Error("sample --adapter-dir: loading a trained adapter directory is not in this build yet; sample the "
                "base model (omit --adapter-dir)",
                ExitCode::not_available);
  std::vector<std::string> prompts = ctx.values("prompt");
  if (ctx.has("prompts")) {
    if (!prompts.empty()) throw UsageError("sample: give either --prompt or --prompts, not both");
    prompts = read_prompts_file(ctx.value("prompts"));
  }
  if (prompts.empty()) throw UsageError("sample: give a prompt (--prompt TEXT) or a prompts file (--prompts FILE)");
  if (!ctx.has("output")) throw UsageError("sample: --output PATH (the PNG to write) is required");
  const std::filesystem::path output = ctx.value("output");

  nlohmann::json request = {{"seed", number<std::uint64_t>(ctx, "seed", 0, 0)},
                            {"steps", number<std::int64_t>(ctx, "steps", 28, 1)},
                            {"guidance", real(ctx, "guidance", 3.5)},
                            {"height", number<std::int64_t>(ctx, "height", 1024, 16)},
                            {"width", number<std::int64_t>(ctx, "width", 1024, 16)}};
  if (ctx.has("max-sequence-length"))
    request["max_sequence_length"] = number<std::int64_t>(ctx, "max-sequence-length", 512, 1);

  const config::Config& cfg = ctx.config();
  if (cfg.get_string("model.id").empty()) throw UsageError("sample: --model (model.id) is required");
  runtime::configure_threads(static_cast<int>(cfg.get_int("run.threads")));
  pipeline::OpenOptions open;
  open.prepare = false;
  auto pipe = pipeline::Pipeline::open(cfg, open);
  if (!pipe->plugin().has(YETO_CAP_GENERATE))
    throw Error("sample: plugin '" + pipe->loaded_plugin().manifest.name + "' does not implement generation",
                ExitCode::not_available);

  // One generation per prompt, each from the same seed: a prompt's picture does not depend on
  // the other prompts of the run.
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    request["prompts"] = nlohmann::json::array({prompts[i]});
    const auto out = pipe->plugin().generate(request.dump(), {});
    at::Tensor images;
    for (const auto& [n, t] : out)
      if (n == "images") images = t;
    if (!images.defined() || images.dim() != 4 || images.size(0) != 1 || images.size(1) != 3)
      throw Error("sample: the plugin returned no 'images' [1, 3, H, W] tensor", ExitCode::failure);
    const auto path = output_path(output, i, prompts.size());
    write_png(path, to_rgb8(images[0]), static_cast<int>(images.size(2)), static_cast<int>(images.size(3)));
    std::cout << path.string() << "\n";
  }
  return 0;
}

}  // namespace
}  // namespace yeto::sample

namespace yeto::cli {

void register_sample_commands(Registry& r) {
  Command c;
  c.name = "sample";
  c.summary = "Generate images from a base model with its family plugin and write PNG files.";
  c.description =
      "Runs the family plugin's sampling pipeline (for Flux: CLIP + T5 conditioning, flow-match Euler steps with the "
      "dynamic shift, VAE decode) and writes each image as PNG. The initial noise is drawn exactly as Diffusers draws "
      "it on CPU (torch.Generator('cpu').manual_seed(SEED), randn of the unpacked latent shape), so a prompt and seed "
      "give the same picture as the Diffusers pipeline. With several prompts (--prompt repeated, or --prompts FILE "
      "with one prompt per line) each prompt is generated on its own from the same seed and written to "
      "<stem>-000<ext>, <stem>-001<ext>, ... beside --output. The model is --model (model.id); the plugin is the one "
      "its alias names or --diffusion-adapter. model.precision auto samples in float32 on CPU.";
  c.run_config = true;
  c.options = {{"prompt", "TEXT", "Prompt (repeatable).", true},
               {"prompts", "FILE", "File with one prompt per line."},
               {"seed", "S", "Seed of the initial noise (default 0)."},
               {"steps", "N", "Denoising steps (default 28)."},
               {"guidance", "G", "Guidance scale (default 3.5)."},
               {"height", "H", "Image height in pixels (default 1024)."},
               {"width", "W", "Image width in pixels (default 1024)."},
               {"max-sequence-length", "L", "Text tokens for the T5 encoder (default: the plugin's, 512 for Flux)."},
               {"output", "PATH", "PNG file to write (required)."},
               {"adapter-dir", "DIR", "A trained adapter directory (not in this build yet)."}};
  c.run = sample::run_sample;
  r.add(std::move(c));
}

}  // namespace yeto::cli
