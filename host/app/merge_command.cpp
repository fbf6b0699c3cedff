// `yeto-host merge --model M --adapter-dir DIR --max-shard-size 2GB --output-dir DIR`: folds an
// adapter into its base model and writes a complete Diffusers repository with the merged
// denoiser as sharded safetensors plus index.
#include <iostream>

#include "app/commands.hpp"
#include "artifacts/merge.hpp"
#include "artifacts/shards.hpp"
#include "core/error.hpp"

namespace yeto::app {
namespace {

int run_merge(CommandContext& ctx) {
  const config::Config& cfg = ctx.config();
  artifacts::MergeOptions o;
  o.model = cfg.get_string("model.id");
  if (o.model.empty()) throw UsageError("merge needs --model M (the base the adapter was trained on)");
  o.revision = cfg.get_string("model.revision");
  o.hub_cache = cfg.get_path("model.hub_cache");
  o.variant = ctx.value("variant");
  const artifacts::AdapterArg arg = artifacts::parse_adapter_arg(ctx.value("adapter-dir"));
  o.adapter = arg.path;
  o.component = arg.component;
  if (o.adapter.empty()) throw UsageError("merge needs --adapter-dir DIR (an adapter directory or LoRA file)");
  o.max_shard_bytes = artifacts::parse_size(ctx.value("max-shard-size", "2GB"));
  o.output_dir = ctx.value("output-dir");
  if (o.output_dir.empty()) throw UsageError("merge needs --output-dir DIR (a new directory)");
  const artifacts::MergeReport r = artifacts::merge_adapter(o);
  for (const auto& c : r.components) {
    std::cout << (c.component.empty() ? std::string("model") : c.component) << ": " << c.modules
              << (r.full ? " fully trained tensors written, " : " LoRA modules merged, ") << c.shards.size() << " shard(s), " << c.total_bytes << " bytes";
    if (!c.index.empty()) std::cout << ", index " << c.index.filename().string();
    std::cout << "\n";
  }
  std::cout << "other files: " << r.linked << " linked, " << r.copied << " copied\n"
            << "wrote " << o.output_dir.string() << "\n";
  return 0;
}

}  // namespace

void register_merge_command(Registry& r) {
  Command c;
  c.name = "merge";
  c.summary = "Fold an adapter into its base model and write sharded safetensors.";
  c.description =
      "Reads the adapter (a directory written by `yeto-host export`, a Diffusers, PEFT or ComfyUI LoRA directory or "
      "file) and the base --model, folds W += scale * B @ A into every adapted weight of the denoiser one tensor at a "
      "time (in float32, cast back to the weight's own dtype) and writes it as safetensors shards of at most "
      "--max-shard-size tensor bytes (2GB = 2*10^9, 2GiB = 2*2^30, 500MB, 10KB, plain bytes) with a "
      "*.safetensors.index.json when there is more than one shard. Every other file of the repository is hard-linked "
      "(copied across file systems), so --output-dir is a complete Diffusers repository. An adapter whose "
      "yeto_diffusion_adapter.json records another base (hub id, commit or component content) is refused, naming "
      "both. A full fine-tune (tuning.mode = full) exported by `export` merges the same way: its tensors replace the "
      "base weights of the same names. See docs/ARTIFACTS.md.";
  c.run_config = true;
  c.options = {
      {"adapter-dir", "DIR", "Adapter directory or LoRA .safetensors file; DIR:COMPONENT merges it into that denoiser "
                             "(e.g. DIR:transformer_2 of Wan 2.2; needed for a two-denoiser model when the adapter has no "
                             "yeto_diffusion_adapter.json).", false, 0},
      {"max-shard-size", "SIZE", "Largest shard (tensor bytes), e.g. 2GB, 500MB, 10KB; default 2GB.", false, 0},
      {"output-dir", "DIR", "Where the merged repository goes (must not exist or be empty).", false, 0},
      {"variant", "NAME", "Weight variant of the base to read (fp16, bf16); default: the main weights.", false, 0},
  };
  c.run = run_merge;
  r.add(std::move(c));
}

}  // namespace yeto::app
