// `yeto-host sample`: generation with a model's family plugin (optionally with a LoRA adapter folded in),
// written as PNG, MP4 or a frames directory, or, for a family whose generation ends in an occupancy
// field (3-D shapes), as a GLB or OBJ mesh of the field's 0 level set, or, for a structure family
// (proteins, nucleic acids, ligands), as mmCIF and / or PDB with one model per sample.
#include <ATen/ATen.h>

#include <cctype>
#include <algorithm>
#include <cmath>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "app/commands.hpp"
#include "artifacts/adapter.hpp"
#include "artifacts/merge.hpp"
#include "config/config.hpp"
#include "core/error.hpp"
#include "data/image.hpp"
#include "data/paths.hpp"
#include "data/torch/batch.hpp"
#include "io/tensors.hpp"
#include "mesh/mesh.hpp"
#include "structure/structure.hpp"
#include "pipeline/pipeline.hpp"
#include "plugin/instance.hpp"
#include "report/grid.hpp"
#include "runtime/torch_runtime.hpp"
#include "sample/fold_adapter.hpp"
#include "sample/media.hpp"
#include "sample/png.hpp"

namespace yeto::app {
namespace {

using sample::check_adapter_plugin;
using sample::fold_adapter;
using sample::FoldReport;
using sample::output_path;
using sample::PromptEntry;
using sample::read_prompt_entries;
using sample::write_frames;
using sample::write_mp4;
using sample::write_png;
using sample::write_wav;

// The largest --height / --width: a typo such as 100000 would otherwise ask for a latent grid
// that no machine holds and die allocating it.
constexpr std::int64_t kMaxSide = 16384;

template <class T>
T number(const CommandContext& ctx, const std::string& option, T fallback, T min,
         T max = std::numeric_limits<T>::max()) {
  if (!ctx.has(option)) return fallback;
  const std::string v = ctx.value(option);
  T out{};
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || end != v.data() + v.size())
    throw UsageError("--" + option + ": '" + v + "' is not a number");
  if (out < min) throw UsageError("--" + option + ": must be at least " + std::to_string(min) + ", got " + v);
  if (out > max) throw UsageError("--" + option + ": must be at most " + std::to_string(max) + ", got " + v);
  return out;
}

double real(const CommandContext& ctx, const std::string& option, double fallback) {
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

enum class Format { png, mp4, frames, mesh, tensors, structure };

Format output_format(const CommandContext& ctx, const std::string& output) {
  const std::string ext = std::filesystem::path(output).extension().string();
  const bool dir = !output.empty() && (output.back() == '/' || std::filesystem::is_directory(output));
  if (ctx.has("format")) {
    const std::string f = ctx.value("format");
    if (f == "frames") return Format::frames;
    if (f != "png" && f != "mp4" && f != "glb" && f != "obj" && f != "safetensors" && f != "cif" && f != "pdb")
      throw UsageError("--format '" + f + "': expected png, mp4, frames, glb, obj, safetensors, cif or pdb");
    if (dir || (ext != "." + f && !(f == "cif" && ext == ".mmcif")))
      throw UsageError("--format " + f + " with --output " + output + ": the output must end in ." + f +
                       " (or drop --format to choose by the extension)");
    if (f == "cif" || f == "pdb") return Format::structure;
    return f == "png" ? Format::png : f == "mp4" ? Format::mp4 : f == "safetensors" ? Format::tensors : Format::mesh;
  }
  if (dir) return Format::frames;
  if (ext == ".png") return Format::png;
  if (ext == ".mp4") return Format::mp4;
  if (ext == ".glb" || ext == ".obj") return Format::mesh;
  if (ext == ".safetensors") return Format::tensors;
  if (ext == ".cif" || ext == ".mmcif" || ext == ".pdb") return Format::structure;
  throw UsageError("--output " + output + ": cannot tell the format from '" + ext +
                   "'; end it in .png (images), .mp4 (a clip), '/' (a directory of PNG frames), .glb / .obj (a "
                   "mesh, for 3-D families), .cif / .pdb (a structure, for structure families) or .safetensors "
                   "(every tensor the plugin generated), or pass --format");
}

// An image file as generate's "image" [1, 3, H, W] in [-1, 1].
at::Tensor image_input(const std::filesystem::path& p, std::int64_t max_pixels) {
  const data::Image img = data::decode_image_file(p, max_pixels);
  at::Tensor rgb = at::from_blob(const_cast<std::uint8_t*>(img.rgb.data()), {img.height, img.width, 3}, at::kByte);
  return (rgb.permute({2, 0, 1}).unsqueeze(0).to(at::kFloat) / 127.5 - 1.0).contiguous();
}

// The tensors a prompt brings to generate: a prompt naming an existing .safetensors file (a
// family conditioned on cached tensors, e.g. image tokens) is read and its tensors are passed by
// name; one naming an existing image file (an image-conditioned family) is decoded and passed as
// "image" [1, 3, H, W] in [-1, 1]; any other prompt is text and brings none.
plugin::NamedTensors prompt_inputs(const std::string& prompt, std::int64_t max_pixels) {
  std::error_code ec;
  const std::filesystem::path p(prompt);
  if (!std::filesystem::is_regular_file(p, ec)) return {};
  std::string ext = p.extension().string();
  for (auto& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (ext != ".safetensors") {
    if (!data::is_image_extension(ext)) return {};
    return {{"image", image_input(p, max_pixels)}};
  }
  plugin::NamedTensors out;
  try {
    for (auto& [name, t] : io::load_safetensors(p)) out.emplace_back(name, t);
  } catch (const Error& e) {
    throw Error("sample: --prompt " + prompt + ": " + e.what(), e.code());
  }
  return out;
}

// The mesh of generate's "occupancy" [B, X, Y, Z] (inside > 0; the surface is its 0 level set),
// spanning "occupancy_bounds" [lo, hi] on every axis, for its first item.
mesh::Mesh occupancy_mesh(const plugin::NamedTensors& outputs) {
  at::Tensor field, bounds;
  for (const auto& [name, t] : outputs) {
    if (name == "occupancy") field = t;
    if (name == "occupancy_bounds") bounds = t;
  }
  if (!field.defined())
    throw Error("sample: the plugin generated no 'occupancy' field, so there is no mesh to write; write its images or "
                "clips as .png / .mp4",
                ExitCode::bad_input);
  if (field.dim() != 4 || !bounds.defined() || bounds.numel() != 2)
    throw Error("sample: the plugin's 'occupancy' must be [B, X, Y, Z] with 'occupancy_bounds' [lo, hi], got " +
                    c10::str(field.sizes()),
                ExitCode::failure);
  const auto f = field[0].to(at::kCPU, at::kFloat).contiguous();
  const auto b = bounds.to(at::kCPU, at::kFloat).contiguous();
  mesh::Grid g;
  g.nx = f.size(0), g.ny = f.size(1), g.nz = f.size(2);
  g.values.assign(f.data_ptr<float>(), f.data_ptr<float>() + f.numel());
  const float lo = b[0].item<float>(), hi = b[1].item<float>();
  g.lo = {lo, lo, lo};
  g.hi = {hi, hi, hi};
  try {
    return mesh::extract_surface(g, 0.f);
  } catch (const std::invalid_argument& e) {
    throw Error(std::string("sample: the plugin's occupancy field: ") + e.what(), ExitCode::failure);
  }
}

// The plugin's sound, when it generated one: "audio" [1, channels (1 or 2), samples] and the
// scalar "audio_sample_rate".
std::optional<sample::AudioTrack> generated_audio(const plugin::NamedTensors& outputs) {
  const at::Tensor* audio = nullptr;
  const at::Tensor* rate = nullptr;
  for (const auto& [name, t] : outputs) {
    if (name == "audio") audio = &t;
    if (name == "audio_sample_rate") rate = &t;
  }
  if (!audio) return std::nullopt;
  if (!rate || rate->numel() != 1)
    throw Error("sample: the plugin returned 'audio' without a scalar 'audio_sample_rate'", ExitCode::failure);
  if (audio->dim() != 3 || audio->size(0) != 1 || (audio->size(1) != 1 && audio->size(1) != 2) || audio->size(2) < 1)
    throw Error("sample: the plugin's 'audio' has shape " + c10::str(audio->sizes()) +
                    "; expected [1, channels (1 or 2), samples]",
                ExitCode::failure);
  const double r = rate->detach().to(at::kDouble).cpu().item<double>();
  if (!(r >= 1000 && r <= 384000) || r != std::floor(r))
    throw Error("sample: the plugin's 'audio_sample_rate' is " + std::to_string(r) + "; expected an integer rate in Hz",
                ExitCode::failure);
  sample::AudioTrack track;
  track.sample_rate = static_cast<int>(r);
  track.channels = static_cast<int>(audio->size(1));
  const at::Tensor pcm = (*audio)[0].detach().to(at::kFloat).cpu().contiguous();
  track.pcm.assign(pcm.data_ptr<float>(), pcm.data_ptr<float>() + pcm.numel());
  return track;
}

// An MP4's sound lasts as long as its picture (frames / fps): a longer track is cut, a shorter
// one padded with silence; the rule is logged.
sample::AudioTrack fit_to_clip(const sample::AudioTrack& a, int frames, double fps) {
  const double seconds = static_cast<double>(frames) / fps;
  const auto want = static_cast<std::int64_t>(std::llround(seconds * a.sample_rate));
  const std::int64_t have = a.samples();
  spdlog::info("sample: sound {} channel(s) at {} Hz, {} samples ({:.3f} s); the clip is {} frames at {} fps = {:.3f} s: {}",
               a.channels, a.sample_rate, have, static_cast<double>(have) / a.sample_rate, frames, fps, seconds,
               have == want ? std::string("kept as it is")
                            : (have > want ? "the last " : "padded with ") + std::to_string(std::llabs(have - want)) +
                                  (have > want ? " samples cut" : " samples of silence"));
  if (have == want) return a;
  sample::AudioTrack out;
  out.sample_rate = a.sample_rate;
  out.channels = a.channels;
  out.pcm.assign(static_cast<std::size_t>(want * a.channels), 0.0f);
  const std::int64_t keep = std::min(have, want);
  for (int c = 0; c < a.channels; ++c)
    std::copy_n(a.pcm.begin() + static_cast<std::ptrdiff_t>(c * have), keep, out.pcm.begin() + static_cast<std::ptrdiff_t>(c * want));
  return out;
}

const at::Tensor* find_output(const plugin::NamedTensors& outputs, const std::string& name) {
  for (const auto& [n, t] : outputs)
    if (n == name) return &t;
  return nullptr;
}

// The structure of generate's "structure_*" tensors (one model per sample):
//   structure_coordinates  float [S, N, 3] (Å), structure_atom_name uint8 [N, 4] (ASCII, NUL-padded),
//   structure_element int64 [N] (atomic number, 0 unknown), structure_residue_name uint8 [N, 3],
//   structure_residue_index int64 [N] (1-based), structure_chain_index int64 [N] (0-based: A..Z, AA, ...),
//   structure_is_hetero uint8 [N] (optional, 0 / 1);
// or of "structure_mmcif" uint8 [bytes]: an mmCIF file the plugin holds (an external program's
// prediction), read with the host's parser. Every violation names the tensor.
structure::Structure structure_from_outputs(const plugin::NamedTensors& outputs, const std::string& plugin_name,
                                            const std::string& name) {
  const std::string who = "sample: plugin '" + plugin_name + "' output ";
  auto bad = [&](const std::string& tensor, const std::string& what) {
    return Error(who + "'" + tensor + "' " + what, ExitCode::failure);
  };
  const at::Tensor* coords = find_output(outputs, "structure_coordinates");
  if (!coords) {
    const at::Tensor* cif = find_output(outputs, "structure_mmcif");
    if (!cif)
      throw Error("sample: plugin '" + plugin_name + "' generated no 'structure_coordinates' (nor 'structure_mmcif'), "
                  "so there is no structure to write; write its images or clips as .png / .mp4",
                  ExitCode::bad_input);
    if (cif->scalar_type() != at::kByte || cif->dim() != 1 || cif->numel() == 0)
      throw bad("structure_mmcif", "must be the bytes of an mmCIF file, uint8 [bytes], got " +
                                       std::string(c10::toString(cif->scalar_type())) + " " + c10::str(cif->sizes()));
    const at::Tensor b = cif->to(at::kCPU).contiguous();
    const std::string text(reinterpret_cast<const char*>(b.data_ptr<std::uint8_t>()), static_cast<std::size_t>(b.numel()));
    structure::Structure s = structure::parse_mmcif(text, "plugin '" + plugin_name + "' structure_mmcif");
    s.name = name;
    return s;
  }
  if (coords->dim() != 3 || coords->size(2) != 3 || coords->size(0) < 1 || coords->size(1) < 1 ||
      !at::isFloatingType(coords->scalar_type()))
    throw bad("structure_coordinates", "must be float [S samples, N atoms, 3] with S, N >= 1, got " +
                                           std::string(c10::toString(coords->scalar_type())) + " " +
                                           c10::str(coords->sizes()));
  const std::int64_t S = coords->size(0), N = coords->size(1);
  auto need = [&](const char* tensor, at::ScalarType type, std::vector<std::int64_t> shape, bool optional = false) {
    const at::Tensor* t = find_output(outputs, tensor);
    if (!t) {
      if (optional) return at::Tensor();
      throw bad(tensor, "is missing: a plugin that generates 'structure_coordinates' [" + std::to_string(S) + ", " +
                            std::to_string(N) + ", 3] must also give it");
    }
    if (t->scalar_type() != type || t->sizes() != at::IntArrayRef(shape))
      throw bad(tensor, "must be " + std::string(c10::toString(type)) + " " + c10::str(at::IntArrayRef(shape)) +
                            " (N atoms of 'structure_coordinates'), got " + std::string(c10::toString(t->scalar_type())) +
                            " " + c10::str(t->sizes()));
    return t->to(at::kCPU).contiguous();
  };
  const at::Tensor names = need("structure_atom_name", at::kByte, {N, 4});
  const at::Tensor elements = need("structure_element", at::kLong, {N});
  const at::Tensor residues = need("structure_residue_name", at::kByte, {N, 3});
  const at::Tensor seq = need("structure_residue_index", at::kLong, {N});
  const at::Tensor chains = need("structure_chain_index", at::kLong, {N});
  const at::Tensor hetero = need("structure_is_hetero", at::kByte, {N}, true);
  // ASCII, printable, NUL-padded at the end only, not empty.
  auto text = [&](const at::Tensor& t, const char* tensor, std::int64_t i) {
    const std::uint8_t* p = t.data_ptr<std::uint8_t>() + i * t.size(1);
    std::string out;
    bool ended = false;
    for (std::int64_t k = 0; k < t.size(1); ++k) {
      if (p[k] == 0) {
        ended = true;
        continue;
      }
      if (ended || p[k] <= ' ' || p[k] >= 127)
        throw bad(tensor, "atom " + std::to_string(i) + ": byte " + std::to_string(k) + " (" + std::to_string(p[k]) +
                              ") is not printable ASCII before the NUL padding");
      out += static_cast<char>(p[k]);
    }
    if (out.empty()) throw bad(tensor, "atom " + std::to_string(i) + " is empty (all NUL)");
    return out;
  };
  structure::Structure s;
  s.name = name;
  s.atoms.resize(static_cast<std::size_t>(N));
  const auto* el = elements.data_ptr<std::int64_t>();
  const auto* sq = seq.data_ptr<std::int64_t>();
  const auto* ch = chains.data_ptr<std::int64_t>();
  for (std::int64_t i = 0; i < N; ++i) {
    auto& a = s.atoms[static_cast<std::size_t>(i)];
    a.name = text(names, "structure_atom_name", i);
    a.residue = text(residues, "structure_residue_name", i);
    if (el[i] < 0 || el[i] > 118)
      throw bad("structure_element", "atom " + std::to_string(i) + ": atomic number " + std::to_string(el[i]) +
                                         " is outside 0..118");
    a.element = structure::element_symbol(el[i]);
    if (sq[i] < 1)
      throw bad("structure_residue_index", "atom " + std::to_string(i) + ": " + std::to_string(sq[i]) +
                                               " (residue indices are 1-based)");
    a.residue_index = sq[i];
    if (ch[i] < 0 || ch[i] > 1000000)
      throw bad("structure_chain_index", "atom " + std::to_string(i) + ": " + std::to_string(ch[i]) +
                                             " (chain indices are 0-based)");
    a.chain = structure::chain_id(ch[i]);
    if (hetero.defined()) {
      const std::uint8_t h = hetero.data_ptr<std::uint8_t>()[i];
      if (h > 1) throw bad("structure_is_hetero", "atom " + std::to_string(i) + ": " + std::to_string(h) + " is not 0 or 1");
      a.hetero = h == 1;
    }
  }
  const at::Tensor xyz = coords->to(at::kCPU, at::kFloat).contiguous();
  const float* x = xyz.data_ptr<float>();
  for (std::int64_t m = 0; m < S; ++m) {
    structure::Coordinates c(static_cast<std::size_t>(N));
    for (std::int64_t i = 0; i < N; ++i)
      for (int k = 0; k < 3; ++k) {
        const float v = x[(m * N + i) * 3 + k];
        if (!std::isfinite(v))
          throw bad("structure_coordinates", "sample " + std::to_string(m) + ", atom " + std::to_string(i) + " (" +
                                                 s.atoms[static_cast<std::size_t>(i)].name + "): a coordinate is " +
                                                 std::to_string(v));
        c[static_cast<std::size_t>(i)][static_cast<std::size_t>(k)] = v;
      }
    s.models.push_back(std::move(c));
  }
  return s;
}

// The structure files of one output: the path itself and, with --structure-format both, the
// same stem in the other format.
std::vector<std::filesystem::path> structure_paths(const std::filesystem::path& path, const std::string& formats) {
  std::filesystem::path cif = path, pdb = path;
  const bool is_pdb = path.extension() == ".pdb";
  if (formats != "both") return {path};
  if (is_pdb)
    cif.replace_extension(".cif");
  else
    pdb.replace_extension(".pdb");
  return {cif, pdb};
}

// The frames directory of prompt `index` of `count`: DIR itself, or DIR-000, DIR-001, ...
std::filesystem::path frames_dir(std::string output, std::size_t index, std::size_t count) {
  while (output.size() > 1 && output.back() == '/') output.pop_back();
  if (count == 1) return output;
  std::string number = std::to_string(index);
  if (number.size() < 3) number.insert(0, 3 - number.size(), '0');
  return output + "-" + number;
}

// Where --compare-base writes the base model's media: the output with "-base" before the
// extension (a frames directory: DIR-base/).
std::string base_output(std::string output) {
  bool dir = false;
  while (output.size() > 1 && output.back() == '/') output.pop_back(), dir = true;
  const std::filesystem::path p(output);
  if (dir || p.extension().empty()) return output + "-base" + (dir ? "/" : "");
  return (p.parent_path() / (p.stem().string() + "-base" + p.extension().string())).string();
}

int run_sample(CommandContext& ctx) {
  std::vector<PromptEntry> prompts;
  for (const auto& p : ctx.values("prompt")) prompts.push_back({p, std::nullopt});
  if (ctx.has("prompts")) {
    if (!prompts.empty()) throw UsageError("sample: give either --prompt or --prompts, not both");
    prompts = read_prompt_entries(ctx.value("prompts"));
  }
  if (prompts.empty()) throw UsageError("sample: give a prompt (--prompt TEXT) or a prompts file (--prompts FILE)");
  if (!ctx.has("output")) throw UsageError("sample: --output PATH (.png, .mp4 or a directory/) is required");
  const std::string output = ctx.value("output");
  const Format format = output_format(ctx, output);
  const bool compare_base = ctx.has("compare-base");
  if (compare_base && !ctx.has("adapter-dir"))
    throw UsageError("sample: --compare-base renders every prompt with the base model and with the adapter; give --adapter-dir DIR");
  if (ctx.has("grid") && (format == Format::mesh || format == Format::structure || format == Format::tensors))
    throw UsageError("--grid: a grid shows images; a " +
                     std::string(format == Format::mesh ? "mesh" : format == Format::tensors ? "tensor" : "structure") +
                     " output (" + output + ") has none");
  const std::string structure_formats = ctx.has("structure-format") ? ctx.value("structure-format") : "";
  if (!structure_formats.empty()) {
    if (structure_formats != "cif" && structure_formats != "pdb" && structure_formats != "both")
      throw UsageError("--structure-format '" + structure_formats + "': expected cif, pdb or both");
    if (format != Format::structure)
      throw UsageError("--structure-format: the output " + output + " is no structure; end it in .cif or .pdb");
    const std::string ext = std::filesystem::path(output).extension().string();
    if (structure_formats != "both" && ext != "." + structure_formats && !(structure_formats == "cif" && ext == ".mmcif"))
      throw UsageError("--structure-format " + structure_formats + " with --output " + output +
                       ": the output must end in ." + structure_formats + " (or use both)");
  }
  if (ctx.has("grid") && std::filesystem::path(ctx.value("grid")).extension() != ".png")
    throw UsageError("--grid " + ctx.value("grid") + ": the grid is a PNG image; end the path in .png");

  const std::uint64_t seed = number<std::uint64_t>(ctx, "seed", 0, 0);
  nlohmann::json request = {{"steps", number<std::int64_t>(ctx, "steps", 28, 1)},
                            {"guidance", real(ctx, "guidance", 3.5)},
                            {"height", number<std::int64_t>(ctx, "height", 1024, 16, kMaxSide)},
                            {"width", number<std::int64_t>(ctx, "width", 1024, 16, kMaxSide)}};
  if (ctx.has("guidance-2")) request["guidance_2"] = real(ctx, "guidance-2", 3.5);
  if (ctx.has("max-sequence-length"))
    request["max_sequence_length"] = number<std::int64_t>(ctx, "max-sequence-length", 512, 1);
  std::optional<std::int64_t> num_frames;
  if (ctx.has("num-frames")) request["num_frames"] = *(num_frames = number<std::int64_t>(ctx, "num-frames", 1, 1));
  const double fps = real(ctx, "fps", 16.0);
  if (!(fps > 0)) throw UsageError("--fps: must be positive, got " + ctx.value("fps"));
  if (ctx.has("fps")) request["fps"] = fps;
  if (ctx.has("mesh-resolution"))
    request["mesh_resolution"] = number<std::int64_t>(ctx, "mesh-resolution", 256, 1, 1024);

  const config::Config& cfg = ctx.config();
  if (cfg.get_string("model.id").empty()) throw UsageError("sample: --model (model.id) is required");
  // Several adapters fold one after another (e.g. the high- and low-noise adapters of Wan 2.2).
  // DIR:COMPONENT names the denoiser an adapter without a record is for (Diffusers names either
  // expert's keys "transformer.").
  std::vector<artifacts::AdapterArg> adapter_dirs;
  for (const auto& d : ctx.values("adapter-dir")) adapter_dirs.push_back(artifacts::parse_adapter_arg(d));
  for (const auto& a : adapter_dirs) {
    if (!std::filesystem::exists(a.path))
      throw Error("--adapter-dir " + a.path.string() + ": no such file or directory", ExitCode::not_found);
    check_adapter_plugin(a.path, cfg);  // before any plugin loads
  }
  runtime::configure_threads(static_cast<int>(cfg.get_int("run.threads")));
  pipeline::OpenOptions open;
  open.prepare = false;
  auto pipe = pipeline::Pipeline::open(cfg, open);
  if (!pipe->plugin().has(YETO_CAP_GENERATE))
    throw Error("sample: plugin '" + pipe->loaded_plugin().manifest.name + "' does not implement generation",
                ExitCode::not_available);
  // The base model is sampled first with --compare-base, then the adapters fold in.
  auto fold_adapters = [&] {
    for (const auto& a : adapter_dirs) {
      // An adapter directory may hold the plugin's own files (capability artifacts) next to its
      // LoRA weights, or instead of them (trainables that no LoRA file holds).
      const std::filesystem::path own = a.path / artifacts::kPluginArtifactDir;
      const bool has_own = std::filesystem::is_directory(own);
      const bool has_lora = !std::filesystem::is_directory(a.path) ||
                            std::filesystem::exists(a.path / artifacts::kDiffusersFile) ||
                            std::filesystem::exists(a.path / artifacts::kPeftWeightsFile);
      if (has_lora || !has_own) {
        const FoldReport folded = fold_adapter(*pipe, cfg, a.path, a.component);
        spdlog::info("sample: folded {} LoRA modules of {} from {} into the model", folded.modules, folded.components,
                     a.path.string());
      }
      if (has_own) {
        const std::string name = pipe->loaded_plugin().manifest.name;
        if (!pipe->plugin().has(YETO_CAP_ARTIFACTS))
          throw Error("sample: " + own.string() + " holds plugin files, but plugin '" + name +
                          "' does not read them (no capability artifacts); sample with the plugin that exported it",
                      ExitCode::bad_input);
        const std::string what = pipe->plugin().load_artifact(own.string());
        spdlog::info("sample: plugin '{}' loaded its files from {}: {}", name, own.string(), what.substr(0, 400));
      }
    }
  };

  // --image: a picture that conditions every prompt's generation (e.g. the first frame of an
  // image-to-video family), next to its text.
  at::Tensor image;
  if (ctx.has("image")) {
    const std::filesystem::path p(ctx.value("image"));
    std::string ext = p.extension().string();
    for (auto& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::error_code ec;
    if (!std::filesystem::is_regular_file(p, ec) || !data::is_image_extension(ext))
      throw UsageError("--image " + p.string() + ": expected an image file (PNG, JPEG, ...)");
    image = image_input(p, cfg.get_int("data.max_pixels"));
  }

  // One generation per prompt, each from its own seed (the prompts file's, else --seed): a
  // prompt's picture does not depend on the other prompts of the run.
  auto generate = [&](std::size_t i, const std::string& to) {
    request["prompts"] = nlohmann::json::array({prompts[i].prompt});
    request["seed"] = prompts[i].seed.value_or(seed);
    // Where a plugin whose generation makes files of its own (an external program's outputs and
    // log) puts them: the output's path without its extension (the host creates nothing there).
    if (format != Format::frames) request["output_dir"] = output_path(to, i, prompts.size()).replace_extension().string();
    auto inputs = prompt_inputs(prompts[i].prompt, cfg.get_int("data.max_pixels"));
    if (image.defined()) inputs.emplace_back("image", image);
    return pipe->plugin().generate(request.dump(), inputs);
  };
  // Writes prompt i's media in the output format; returns the first frame for the grid.
  auto write = [&](std::size_t i, const plugin::NamedTensors& outputs, const std::string& to) {
    if (format == Format::tensors) {
      // Every tensor generate returned, by its name (latents of a family without a decoder here).
      const auto path = output_path(to, i, prompts.size());
      std::vector<std::pair<std::string, at::Tensor>> tensors;
      for (const auto& [name, t] : outputs) tensors.emplace_back(name, t.detach().to(at::kCPU).contiguous());
      if (tensors.empty()) throw Error("sample: the plugin generated no tensor", ExitCode::failure);
      io::save_safetensors(path, tensors);
      std::string names;
      for (const auto& [name, t] : tensors) names += (names.empty() ? "" : ", ") + name + " " + c10::str(t.sizes());
      spdlog::info("sample: {} -> {}", names, path.string());
      std::cout << path.string() << "\n";
      return report::Image{};
    }
    if (format == Format::structure) {
      const auto path = output_path(to, i, prompts.size());
      // A plugin that ran an external program reports how many files it left in output_dir.
      if (const at::Tensor* files = find_output(outputs, "output_files"); files && files->numel() == 1) {
        const auto dir = std::filesystem::path(path).replace_extension();
        spdlog::info("sample: plugin '{}' left {} file(s) in {}", pipe->loaded_plugin().manifest.name,
                     files->to(at::kCPU).to(at::kLong).item<std::int64_t>(), dir.string());
        if (!find_output(outputs, "structure_coordinates") && !find_output(outputs, "structure_mmcif")) {
          spdlog::warn("sample: plugin '{}' gave no structure (no predicted model); nothing written to {}",
                       pipe->loaded_plugin().manifest.name, path.string());
          std::cout << dir.string() << "\n";
          return report::Image{};
        }
      }
      const auto s = structure_from_outputs(outputs, pipe->loaded_plugin().manifest.name, path.stem().string());
      for (const auto& p : structure_paths(path, structure_formats)) {
        structure::write_structure(p, s);
        spdlog::info("sample: structure of {} atoms, {} model(s) -> {}", s.atoms.size(), s.models.size(), p.string());
        std::cout << p.string() << "\n";
      }
      return report::Image{};
    }
    if (find_output(outputs, "structure_coordinates"))
      throw Error("sample: plugin '" + pipe->loaded_plugin().manifest.name +
                      "' generated a structure ('structure_coordinates'); write it as .cif or .pdb",
                  ExitCode::bad_input);
    if (format == Format::mesh) {
      const auto path = output_path(to, i, prompts.size());
      const auto m = occupancy_mesh(outputs);
      mesh::write_mesh(path, m);
      spdlog::info("sample: mesh of {} vertices, {} triangles ({}) -> {}", m.vertices.size(), m.faces.size(),
                   mesh::watertight(m) ? "watertight" : "open", path.string());
      std::cout << path.string() << "\n";
      return report::Image{};
    }
    const at::Tensor media = data::generated_media(outputs, "sample");
    const bool video = media.dim() == 5;
    const int frames = video ? static_cast<int>(media.size(2)) : 1;
    const int height = static_cast<int>(media.size(-2)), width = static_cast<int>(media.size(-1));
    if (num_frames && video && *num_frames != frames)
      spdlog::info("sample: the plugin's shape rules changed --num-frames {} to {} frames", *num_frames, frames);
    if (num_frames && !video && *num_frames != 1)
      spdlog::info("sample: --num-frames {} asked, the plugin generated one image", *num_frames);
    const auto rgb = data::media_to_rgb8(media[0]);
    const auto audio = generated_audio(outputs);
    std::filesystem::path path;
    // Outside an MP4 the whole sound goes to a WAV file beside the picture(s).
    auto write_sound = [&](const std::filesystem::path& wav) {
      if (!audio) return;
      write_wav(wav, *audio);
      spdlog::info("sample: sound {} channel(s) at {} Hz, {:.3f} s -> {}", audio->channels, audio->sample_rate,
                   static_cast<double>(audio->samples()) / audio->sample_rate, wav.string());
    };
    switch (format) {
      case Format::png:
        if (video)
          throw Error("sample: the plugin generated a " + std::to_string(frames) + "-frame video; write it as .mp4 or "
                      "a frames directory (--output DIR/), not as PNG",
                      ExitCode::bad_input);
        path = output_path(to, i, prompts.size());
        write_png(path, rgb, height, width);
        write_sound(std::filesystem::path(path).replace_extension(".wav"));
        break;
      case Format::mp4: {
        path = output_path(to, i, prompts.size());
        std::optional<sample::AudioTrack> track;
        if (audio) track = fit_to_clip(*audio, frames, fps);
        const std::string codec = write_mp4(path, rgb, frames, height, width, fps, "", track ? &*track : nullptr);
        spdlog::info("sample: {} frame(s) {}x{} at {} fps, encoder {}", frames, width, height, fps, codec);
        break;
      }
      case Format::frames:
        path = frames_dir(to, i, prompts.size());
        write_frames(path, rgb, frames, height, width);
        write_sound(path / "audio.wav");
        break;
      case Format::mesh:  // written above
      case Format::tensors:
      case Format::structure:
        break;
    }
    std::cout << path.string() << "\n";
    report::Image first;
    first.width = width;
    first.height = height;
    first.rgb.assign(rgb.begin(), rgb.begin() + static_cast<std::ptrdiff_t>(width) * height * 3);
    return first;
  };

  std::vector<std::vector<report::Image>> cells(prompts.size());
  if (compare_base)
    for (std::size_t i = 0; i < prompts.size(); ++i) cells[i].push_back(write(i, generate(i, base_output(output)), base_output(output)));
  fold_adapters();
  for (std::size_t i = 0; i < prompts.size(); ++i) cells[i].push_back(write(i, generate(i, output), output));

  if (ctx.has("grid")) {
    report::GridSpec spec;
    std::string with = "base model";
    for (const auto& a : adapter_dirs) with += " + " + a.path.filename().string();
    if (compare_base) spec.column_titles.push_back("base model");
    spec.column_titles.push_back(with);
    for (const auto& p : prompts) spec.row_labels.push_back(p.prompt);
    spec.cells = std::move(cells);
    const report::Image grid = report::labelled_grid(spec);
    write_png(ctx.value("grid"), grid.rgb, grid.height, grid.width);
    spdlog::info("sample: grid of {} prompt(s) x {} column(s) -> {}", prompts.size(), spec.column_titles.size(),
                 ctx.value("grid"));
  }
  return 0;
}

}  // namespace

void register_sample_command(Registry& r) {
  Command c;
  c.name = "sample";
  c.summary = "Generate images, clips, meshes or structures from a base model (optionally with an adapter) and write "
              "PNG, MP4, frames, GLB, OBJ, mmCIF or PDB.";
  c.description =
      "Runs the family plugin's sampling pipeline (for Flux: CLIP + T5 conditioning, flow-match Euler steps with the "
      "dynamic shift, VAE decode). The initial noise is drawn exactly as Diffusers draws it on CPU "
      "(torch.Generator('cpu').manual_seed(SEED), randn of the unpacked latent shape), so a prompt and seed give the "
      "same picture as the Diffusers pipeline. --adapter-dir DIR folds a LoRA adapter (any layout `merge` reads) into "
      "the denoiser weights first, W += scale * B @ A as `merge` does; an adapter recorded for another base model is "
      "refused, and the plugin an adapter records is never loaded implicitly (pass --diffusion-adapter NAME). The "
      "output format follows --output: .png (images; a video is refused), .mp4 (H.264 through libx264 when FFmpeg has "
      "it, else MPEG-4 part 2; an image is a 1-frame clip), or a directory ending in '/' (or --format frames) of "
      "frame-00000.png, ... When the plugin also generates sound ('audio' [1, channels, samples] and "
      "'audio_sample_rate'), the MP4 gets an AAC track (Opus when FFmpeg has no AAC encoder) lasting as long as the "
      "frames at --fps (a longer track is cut, a shorter one padded with silence; logged); a PNG gets the sound as "
      "<stem>.wav beside it, a frames directory as audio.wav inside it. With several prompts (--prompt repeated, or --prompts FILE with one prompt per line or "
      "JSON lines {\"prompt\": ..., \"seed\": N}) each prompt is generated on its own from its seed (else --seed) and "
      "written to <stem>-000<ext>, ... (DIR-000/, ... for frames). A family whose generation ends in an occupancy "
      "field (Hunyuan3D-2.1) writes the field's 0 level set as a mesh: .glb (binary glTF 2.0) or .obj; a prompt naming "
      "a .safetensors file hands its tensors to the plugin by name (e.g. cached image tokens 'image_embeds'), one naming "
      "an image file its pixels as 'image' (Hunyuan3D-2.1's image prompt, encoded by the repository's conditioner). An "
      "output ending in .safetensors (or --format safetensors) holds every tensor generate returned, by name (a "
      "family's latents where no decoder runs here, e.g. NAVA's video and audio latents). A "
      "structure family writes .cif (mmCIF, an atom_site loop) or .pdb (fixed-column ATOM / HETATM records), one model "
      "per sample; --structure-format both writes both (the same stem). A plugin that runs an external program (AlphaFold "
      "3) leaves that program's files, exit status and log in the output's path without its extension (fold.cif: "
      "fold/). The model is --model (model.id); the plugin is the "
      "one its alias names or --diffusion-adapter. model.precision auto samples in float32 on CPU.";
  c.run_config = true;
  c.options = {{"prompt", "TEXT", "Prompt (repeatable).", true},
               {"prompts", "FILE", "Prompts file: one per line, or JSON lines with prompt and seed."},
               {"seed", "S", "Seed of the initial noise (default 0); a prompts file's seed wins."},
               {"steps", "N", "Denoising steps (default 28)."},
               {"guidance", "G", "Guidance scale (default 3.5)."},
               {"guidance-2", "G", "Guidance of the second (low-noise) denoiser of two-denoiser models such as Wan 2.2 "
                                   "(default: --guidance)."},
               {"height", "H", "Height in pixels (default 1024, at most 16384)."},
               {"width", "W", "Width in pixels (default 1024, at most 16384)."},
               {"num-frames", "F", "Frames to generate (video families; the plugin may round it, which is logged)."},
               {"fps", "R", "Frame rate of the clip (forwarded to the plugin; MP4 default 16)."},
               {"image", "FILE", "An image that conditions every prompt (passed to the plugin as 'image' [1, 3, H, W] in "
                                 "[-1, 1]; e.g. the first frame of Wan 2.2 TI2V's image-to-video)."},
               {"max-sequence-length", "L", "Text tokens for the T5 encoder (default: the plugin's, 512 for Flux)."},
               {"mesh-resolution", "R", "Grid cells per axis of a 3-D family's occupancy field (the plugin's default, "
                                        "256 for Hunyuan3D-2.1; at most 1024)."},
               {"output", "PATH", "Output: FILE.png, FILE.mp4, DIR/ (frames), FILE.glb / FILE.obj (meshes), FILE.cif / "
                                  "FILE.pdb (structures) or FILE.safetensors (every generated tensor) (required)."},
               {"format", "F", "png, mp4, frames, glb, obj, cif, pdb or safetensors (default: from --output)."},
               {"structure-format", "F", "cif, pdb or both: a structure's files (default: the one --output names; both: "
                                         "also the other format, same stem). PDB refuses what its columns cannot hold "
                                         "(over 99999 atoms, 9999 residues or 26 chains): write mmCIF for those."},
               {"compare-base", "", "Render every prompt with the base model too, before the adapters fold in (same seed), as <stem>-base<ext>; needs --adapter-dir."},
               {"grid", "FILE.png", "Also write a labelled grid: one row per prompt, the base model (with --compare-base) and the adapted model side by side (the first frame of a clip)."},
               {"adapter-dir", "DIR", "A LoRA adapter directory or file to apply (needs --diffusion-adapter when it records a plugin); repeatable: each is folded in turn. DIR:COMPONENT folds it into that denoiser (e.g. DIR:transformer_2, the low-noise expert of Wan 2.2), needed with several denoisers for an adapter without yeto_diffusion_adapter.json.", true}};
  c.run = run_sample;
  r.add(std::move(c));
}

}  // namespace yeto::app
