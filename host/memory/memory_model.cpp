#include "memory/memory_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/error.hpp"

namespace yeto::memory {

using json = nlohmann::json;

std::int64_t TensorEntry::numel() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

double dtype_bytes(const std::string& d) {
  if (d == "f64" || d == "i64" || d == "u64") return 8;
  if (d == "f32" || d == "i32" || d == "u32") return 4;
  if (d == "bf16" || d == "f16" || d == "i16" || d == "u16") return 2;
  if (d == "f8_e4m3" || d == "f8_e5m2" || d == "u8" || d == "i8" || d == "bool") return 1;
  throw Error("memory model: unknown dtype '" + d + "'", ExitCode::bad_input);
}

std::string format_bytes(double b) {
  char buf[32];
  if (b >= 1e9) std::snprintf(buf, sizeof buf, "%.2f GB", b / 1e9);
  else if (b >= 1e6) std::snprintf(buf, sizeof buf, "%.0f MB", b / 1e6);
  else std::snprintf(buf, sizeof buf, "%.0f kB", b / 1e3);
  return buf;
}

// ---- (de)serialisation -----------------------------------------------------------------------

TokenGeometry TokenGeometry::from_json(const json& j, const std::string& where) {
  TokenGeometry g;
  if (j.is_null()) return g;
  if (!j.is_object()) throw Error(where + ": 'memory' must be an object", ExitCode::bad_input);
  auto int_key = [&](const char* k, int& out, int lo) {
    if (!j.contains(k)) return;
    if (!j[k].is_number_integer() || j[k].get<int>() < lo)
      throw Error(where + ": 'memory." + k + "' must be an integer >= " + std::to_string(lo), ExitCode::bad_input);
    out = j[k].get<int>();
  };
  int_key("token_pixels", g.token_pixels, 1);
  int_key("token_frames", g.token_frames, 0);
  int_key("text_tokens", g.text_tokens, 0);
  int_key("encode_frames", g.encode_frames, 0);
  if (j.contains("attention")) {
    if (!j["attention"].is_string() || (j["attention"] != "joint" && j["attention"] != "self_cross"))
      throw Error(where + ": 'memory.attention' must be \"joint\" or \"self_cross\"", ExitCode::bad_input);
    g.attention = j["attention"].get<std::string>();
  }
  if (j.contains("heads_key")) {
    if (!j["heads_key"].is_string()) throw Error(where + ": 'memory.heads_key' must be a string", ExitCode::bad_input);
    g.heads_key = j["heads_key"].get<std::string>();
  }
  auto strings = [&](const char* k, std::vector<std::string>& out) {
    if (!j.contains(k)) return;
    const std::string msg = where + ": 'memory." + k + "' must be an array of strings";
    if (!j[k].is_array()) throw Error(msg, ExitCode::bad_input);
    for (const auto& x : j[k]) {
      if (!x.is_string()) throw Error(msg, ExitCode::bad_input);
      out.push_back(x.get<std::string>());
    }
  };
  strings("per_sample_linears", g.per_sample_linears);
  strings("text_linears", g.text_linears);
  return g;
}

json TokenGeometry::to_json() const {
  return {{"token_pixels", token_pixels}, {"token_frames", token_frames}, {"text_tokens", text_tokens},
          {"encode_frames", encode_frames}, {"attention", attention}, {"heads_key", heads_key}, {"per_sample_linears", per_sample_linears},
          {"text_linears", text_linears}};
}

json Inventory::to_json() const {
  json comps = json::array();
  for (const auto& c : components) {
    json ps = json::array();
    for (const auto& t : c.parameters) ps.push_back({t.name, t.shape, t.dtype});
    comps.push_back({{"name", c.name}, {"class", c.class_name}, {"denoiser", c.denoiser}, {"parameters", ps}});
  }
  json lj = json::array();
  for (const auto& t : lora) lj.push_back({t.name, t.shape, t.dtype});
  return {{"model", model}, {"compute_dtype", compute_dtype}, {"tokens", tokens.to_json()}, {"heads", heads},
          {"components", comps}, {"lora", lj}};
}

namespace {

TensorEntry tensor_from_json(const json& t, const std::string& where) {
  if (!t.is_array() || t.size() != 3 || !t[0].is_string() || !t[1].is_array() || !t[2].is_string())
    throw Error(where + ": a tensor must be [name, shape, dtype]", ExitCode::bad_input);
  TensorEntry e{t[0].get<std::string>(), t[1].get<std::vector<std::int64_t>>(), t[2].get<std::string>()};
  dtype_bytes(e.dtype);
  return e;
}

}  // namespace

Inventory Inventory::from_json(const json& j, const std::string& where) {
  Inventory inv;
  try {
    inv.model = j.value("model", "");
    inv.compute_dtype = j.value("compute_dtype", "bf16");
    inv.tokens = TokenGeometry::from_json(j.value("tokens", json()), where);
    inv.heads = j.value("heads", std::map<std::string, int>{});
    for (const auto& c : j.at("components")) {
      ComponentEntry e{c.at("name").get<std::string>(), c.value("class", ""), c.value("denoiser", false), {}};
      for (const auto& t : c.at("parameters")) e.parameters.push_back(tensor_from_json(t, where));
      inv.components.push_back(std::move(e));
    }
    for (const auto& t : j.value("lora", json::array())) inv.lora.push_back(tensor_from_json(t, where));
  } catch (const json::exception& e) {
    throw Error(where + ": not a memory inventory: " + e.what(), ExitCode::bad_input);
  }
  return inv;
}

json Breakdown::to_json() const {
  json ps = json::array();
  for (const auto& p : parts) ps.push_back({{"part", p.name}, {"host_bytes", p.host_bytes}, {"device_bytes", p.device_bytes}});
  return {{"parts", ps},           {"host_bytes", host_bytes},   {"device_bytes", device_bytes},
          {"base_params", base_params}, {"lora_params", lora_params}, {"blocks", blocks},
          {"image_tokens", image_tokens}, {"text_tokens", text_tokens}};
}

// ---- the model ---------------------------------------------------------------------------------

BackendCosts BackendCosts::of(Backend b) {
  // CPU: measured (docs/BENCHMARKS.md, "Memory model: estimate against measured peaks").
  // CUDA: the context and the allocator's reserve, and a process with the CUDA libraries mapped;
  // not measured on this project's machines yet.
  if (b == Backend::cuda) return {1.5e9, 0.75e9, 1.0, 0.0};  // the caching allocator reuses its blocks
  return {kCpuRuntimeBytes, 0, kCpuActivationFactor, kCpuHeapRetention};
}

std::int64_t image_tokens(const TokenGeometry& g, int height, int width, int frames) {
  const std::int64_t h = (height + g.token_pixels - 1) / g.token_pixels;
  const std::int64_t w = (width + g.token_pixels - 1) / g.token_pixels;
  std::int64_t t = 1;
  if (g.token_frames > 0 && frames > 1) t = (frames - 1) / g.token_frames + 1;
  return h * w * t;
}

namespace {

// "transformer_blocks.3.attn.to_q.weight" -> {"transformer_blocks.3", "attn.to_q.weight"}: the
// elements of a denoiser's direct-child module lists (nn::block_modules' numbering).
bool split_block(const std::string& name, std::string& block, std::string& rest) {
  const auto a = name.find('.');
  if (a == std::string::npos || a == 0) return false;
  const auto b = name.find('.', a + 1);
  if (b == std::string::npos || b == a + 1) return false;
  for (auto i = a + 1; i < b; ++i)
    if (name[i] < '0' || name[i] > '9') return false;
  block = name.substr(0, b);
  rest = name.substr(b + 1);
  return true;
}

bool ends_with_module(const std::string& module, const std::string& pattern) {
  if (module == pattern) return true;
  return module.size() > pattern.size() && module.compare(module.size() - pattern.size(), pattern.size(), pattern) == 0 &&
         module[module.size() - pattern.size() - 1] == '.';
}

struct Block {
  std::string component;
  double base_bytes = 0;              // as stored (after fp8)
  double linear_bytes = 0;            // of it, its 2-D Linear weights (what fsdp and block swap move)
  double feature_sum = 0;             // sum of in + out features of its per-token 2-D weights
  double text_feature_sum = 0;        // the same for its linear layers that see text tokens only
  std::int64_t hidden = 0;            // its most common input width
  std::int64_t max_out = 0;           // its widest output
};

}  // namespace

Breakdown estimate(const Inventory& inv, const RunShape& run) {
  if (run.micro_batch < 1 || run.height < 1 || run.width < 1 || run.frames < 1)
    throw UsageError("memory model: height, width, frames and micro batch must be >= 1");
  if (run.storage != "auto" && run.storage != "fp8")
    throw UsageError("memory model: storage '" + run.storage + "': expected auto or fp8");
  if (run.fsdp_ranks < 1) throw UsageError("memory model: fsdp ranks must be >= 1");
  if (run.block_swap < 0) throw UsageError("memory model: block swap must be >= 0");
  const BackendCosts costs = BackendCosts::of(run.backend);
  const bool fp8 = run.storage == "fp8";
  const double act = dtype_bytes(inv.compute_dtype);

  Breakdown out;
  std::map<std::string, double> base_by_dtype;   // outside the denoisers' blocks, or all on the CPU
  double nonblock_denoiser = 0, encoders = 0;
  std::vector<Block> blocks;
  std::map<std::string, std::size_t> block_index;
  double largest_linear = 0;  // elements of the denoisers' largest 2-D weight
  double largest_block_linear = 0;  // bytes, as stored, of the largest 2-D weight inside a block
  std::int64_t pixel_channels = 0;  // out channels of the widest convolution reading RGB pixels
  for (const auto& c : inv.components) {
    for (const auto& t : c.parameters) {
      const std::int64_t n = t.numel();
      out.base_params += n;
      std::string dtype = t.dtype;
      double bytes = static_cast<double>(n) * dtype_bytes(t.dtype);
      const bool linear = t.shape.size() == 2 && t.name.size() > 7 && t.name.ends_with(".weight");
      if (c.denoiser && linear) largest_linear = std::max(largest_linear, static_cast<double>(n));
      if (fp8 && c.denoiser && linear) {
        dtype = "fp8 (+ row scales)";
        bytes = static_cast<double>(n) + 4.0 * static_cast<double>(t.shape[0]);
      }
      std::string bname, rest;
      if (!c.denoiser) {
        encoders += bytes;
        if (t.shape.size() >= 4 && t.shape[1] == 3 && t.name.ends_with(".weight"))
          pixel_channels = std::max(pixel_channels, t.shape[0]);
      } else if (split_block(t.name, bname, rest)) {
        const std::string key = c.name + "/" + bname;
        auto it = block_index.find(key);
        if (it == block_index.end()) {
          it = block_index.emplace(key, blocks.size()).first;
          blocks.push_back(Block{c.name, 0, 0, 0, 0, 0});
        }
        Block& b = blocks[it->second];
        b.base_bytes += bytes;
        if (linear) {
          b.linear_bytes += bytes;
          largest_block_linear = std::max(largest_block_linear, bytes);
          const std::string module = rest.substr(0, rest.size() - 7);
          bool per_sample = false, text = false;
          for (const auto& p : inv.tokens.per_sample_linears) per_sample = per_sample || ends_with_module(module, p);
          for (const auto& p : inv.tokens.text_linears) text = text || ends_with_module(module, p);
          if (text) {
            b.text_feature_sum += static_cast<double>(t.shape[0] + t.shape[1]);
          } else if (!per_sample) {
            b.feature_sum += static_cast<double>(t.shape[0] + t.shape[1]);
            b.max_out = std::max(b.max_out, t.shape[0]);
          }
        }
      } else {
        nonblock_denoiser += bytes;
      }
      base_by_dtype[dtype] += bytes;
    }
  }
  // Each block's most common input width (its hidden size).
  for (const auto& c : inv.components) {
    if (!c.denoiser) continue;
    std::map<std::string, std::map<std::int64_t, int>> widths;
    for (const auto& t : c.parameters) {
      std::string bname, rest;
      if (t.shape.size() == 2 && t.name.ends_with(".weight") && split_block(t.name, bname, rest)) ++widths[bname][t.shape[1]];
    }
    for (auto& [bname, w] : widths) {
      auto best = std::max_element(w.begin(), w.end(), [](auto& x, auto& y) { return x.second < y.second; });
      blocks[block_index[c.name + "/" + bname]].hidden = best->first;
    }
  }
  out.blocks = static_cast<std::int64_t>(blocks.size());

  // Tokens.
  const TokenGeometry& g = inv.tokens;
  const std::int64_t mb = run.micro_batch;
  out.image_tokens = image_tokens(g, run.height, run.width, run.frames);
  out.text_tokens = run.text_tokens > 0 ? run.text_tokens : g.text_tokens;
  const bool joint = g.attention == "joint";
  const double l_lin = static_cast<double>(mb) * static_cast<double>(out.image_tokens + (joint ? out.text_tokens : 0));
  const double lq = static_cast<double>(out.image_tokens + (joint ? out.text_tokens : 0));
  auto heads_of = [&](const std::string& comp) {
    auto it = inv.heads.find(comp);
    return it == inv.heads.end() ? 1.0 : static_cast<double>(std::max(1, it->second));
  };
  // Attention kept for backward by a backend without fused attention: the softmax in float32 and
  // its copy in the compute dtype for the product with V (one copy in float32 compute).
  const double score_bytes = run.fused_attention ? 0.0 : (act >= 4 ? 4.0 : 4.0 + act);
  auto attention_kept = [&](const Block& b) {
    const double h = heads_of(b.component);
    if (run.fused_attention) return static_cast<double>(mb) * h * lq * 4.0;  // logsumexp only
    double s = h * lq * lq;
    if (!joint) s += h * static_cast<double>(out.image_tokens) * static_cast<double>(out.text_tokens);
    return static_cast<double>(mb) * s * score_bytes;
  };
  const double l_text = static_cast<double>(mb) * static_cast<double>(out.text_tokens);
  auto block_full = [&](const Block& b) {
    return (l_lin * b.feature_sum + l_text * b.text_feature_sum) * act * costs.activation_factor + attention_kept(b);
  };
  auto block_input = [&](const Block& b) { return l_lin * static_cast<double>(b.hidden) * act; };

  const bool sharded = run.fsdp_ranks > 1;
  const bool ckpt = run.checkpointing || sharded;
  const int every = sharded ? 1 : std::max(1, run.checkpointing_every);
  // Per denoiser (blocks numbered from 0 in each, as nn::CheckpointedBlocks does); with two
  // denoisers (Wan 2.2 A14B) a micro batch's rows are split between them by timestep, so the
  // step holds about one denoiser's activations over all rows: the larger one counts.
  double activations = 0, uncheckpointed = 0;
  std::map<std::string, std::pair<double, double>> per_denoiser;  // kept + rebuilt, uncheckpointed
  std::map<std::string, std::size_t> index;
  std::map<std::string, double> rebuilt;
  for (const auto& b : blocks) {
    const std::size_t i = index[b.component]++;
    const bool checkpointed = ckpt && i % static_cast<std::size_t>(every) == 0;
    auto& d = per_denoiser[b.component];
    d.first += checkpointed ? block_input(b) : block_full(b);
    d.second += block_full(b);
    if (checkpointed) rebuilt[b.component] = std::max(rebuilt[b.component], block_full(b));
  }
  for (const auto& [name, d] : per_denoiser) {
    activations = std::max(activations, d.first + rebuilt[name]);
    uncheckpointed = std::max(uncheckpointed, d.second);
  }
  // The denoiser's input and output, the target and the loss terms: a few latents in float32.
  activations += static_cast<double>(mb) * static_cast<double>(out.image_tokens) * 64.0 * 4.0 * 4.0;

  // Workspace: the widest GEMM's output in float32 and one attention's scores before softmax.
  double workspace = 0;
  for (const auto& b : blocks) {
    const double h = heads_of(b.component);
    workspace = std::max(workspace, l_lin * static_cast<double>(b.max_out) * 4.0);
    if (!run.fused_attention) workspace = std::max(workspace, static_cast<double>(mb) * h * lq * lq * 4.0);
  }
  // fp8: one block of dequantised weight (nn::kFp8BlockElements, 8 M elements) at a time.
  if (fp8) workspace += std::min(8.0 * 1024 * 1024, largest_linear) * act;

  const double retained = costs.heap_retention * uncheckpointed;
  // Encoding raw media: the VAE's full-resolution feature maps (input, norm, activation,
  // convolution, residual and one spare), float32.
  double encode = 0;
  if (!run.cached_latents) {
    const int frames = g.encode_frames > 0 ? std::min(run.frames, g.encode_frames) : run.frames;
    encode = static_cast<double>(mb) * static_cast<double>(pixel_channels) * run.height * run.width * frames * 4.0 * 6.0;
  }
  const double step_transient = activations + workspace;
  if (encode > step_transient) {
    activations = 0;
    workspace = encode;
  }

  // LoRA: float32 master, gradient and AdamW's two moments.
  double lora = 0;
  for (const auto& t : inv.lora) {
    out.lora_params += t.numel();
    lora += static_cast<double>(t.numel()) * 16.0;
  }

  // Where the frozen base lives.
  double block_bytes = 0, block_linear_bytes = 0;
  for (const auto& b : blocks) {
    block_bytes += b.base_bytes;
    block_linear_bytes += b.linear_bytes;
  }
  out.blocks_bytes = block_bytes;
  // fsdp and block swap move a block's Linear weights one at a time (nn::BlockShards): the one in
  // use and the next one prefetched are whole, so at most two of the largest are in flight.
  const double in_flight = 2 * largest_block_linear;
  // Block swap moves blocks between host and device memory: nothing to move on the CPU backend.
  const bool cuda = run.backend == Backend::cuda;
  const int swap = cuda ? std::min<int>(run.block_swap, static_cast<int>(blocks.size())) : 0;
  double blocks_resident = block_bytes;
  if (sharded) blocks_resident = block_bytes / run.fsdp_ranks + in_flight;  // shards + two whole weights
  double swapped_host = 0;
  if (swap > 0) {
    // The swapped blocks' Linear weights live on the host; their biases and norms stay.
    const double mean_linear = block_linear_bytes / static_cast<double>(blocks.size());
    swapped_host = mean_linear * swap;
    blocks_resident = blocks_resident - swapped_host + std::min(swapped_host, in_flight);
  }
  const double base_total = encoders + nonblock_denoiser + blocks_resident;

  // Parts: the base by storage dtype (scaled to what is resident), then the rest.
  double base_sum = 0;
  for (const auto& [d, b] : base_by_dtype) base_sum += b;
  const double base_scale = base_sum > 0 ? base_total / base_sum : 0;
  for (const auto& [d, b] : base_by_dtype) {
    const double v = b * base_scale;
    out.parts.push_back({"frozen base " + d, cuda ? 0 : v, cuda ? v : 0});
  }
  if (swap > 0) out.parts.push_back({"swapped blocks (host)", swapped_host, 0});
  out.parts.push_back({"lora + grads + adamw", cuda ? 0 : lora, cuda ? lora : 0});
  out.parts.push_back({"activations", cuda ? 0 : activations, cuda ? activations : 0});
  out.parts.push_back({encode > step_transient ? "workspace (media encoding)" : "workspace", cuda ? 0 : workspace,
                       cuda ? workspace : 0});
  if (retained > 0) out.parts.push_back({"allocator retention", retained, 0});
  out.parts.push_back({"runtime", costs.runtime_host_bytes, costs.runtime_device_bytes});
  for (const auto& p : out.parts) {
    out.host_bytes += p.host_bytes;
    out.device_bytes += p.device_bytes;
  }
  return out;
}

std::string describe(const Inventory& inv, const RunShape& run, const Breakdown& b) {
  std::ostringstream o;
  o << "memory of " << (inv.model.empty() ? std::string("the model") : inv.model) << ": " << run.width << "x"
    << run.height;
  if (run.frames > 1) o << ", " << run.frames << " frames";
  o << ", micro batch " << run.micro_batch << " (" << b.image_tokens << " image + " << b.text_tokens
    << " text tokens), compute " << inv.compute_dtype << ", storage " << (run.storage == "fp8" ? "fp8" : inv.compute_dtype)
    << ", checkpointing " << (run.checkpointing ? (run.checkpointing_every > 1 ? "every " + std::to_string(run.checkpointing_every) : std::string("every block")) : std::string("off"))
    << ", block swap " << run.block_swap << (run.block_swap > 0 && run.backend != Backend::cuda ? " (no effect on the CPU)" : "")
    << ", fsdp ranks " << run.fsdp_ranks << ", "
    << (run.backend == Backend::cuda ? "cuda" : "cpu") << (run.fused_attention ? " (fused attention)" : " (attention scores kept)")
    << "\n";
  o << "  " << b.base_params / 1000000 << " M frozen parameters, " << b.blocks << " denoiser blocks, "
    << b.lora_params / 1000 << " k LoRA parameters\n";
  char line[160];
  std::snprintf(line, sizeof line, "  %-28s %12s %12s\n", "part", "host", "device");
  o << line;
  for (const auto& p : b.parts) {
    std::snprintf(line, sizeof line, "  %-28s %12s %12s\n", p.name.c_str(), format_bytes(p.host_bytes).c_str(),
                  run.backend == Backend::cuda ? format_bytes(p.device_bytes).c_str() : "-");
    o << line;
  }
  std::snprintf(line, sizeof line, "  %-28s %12s %12s\n", "expected peak", format_bytes(b.host_bytes).c_str(),
                run.backend == Backend::cuda ? format_bytes(b.device_bytes).c_str() : "-");
  o << line;
  return o.str();
}

}  // namespace yeto::memory
