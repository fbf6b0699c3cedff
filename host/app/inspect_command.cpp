// `yeto-host inspect PATH|ID`: resolves a model (alias, hub id or directory) offline, opens it as
// a Diffusers repository and validates every component's config and weight headers without
// reading tensor data. Exits with the loader's error code when anything is invalid.
#include <iostream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "app/commands.hpp"
#include "app/memory_inventory.hpp"
#include "core/error.hpp"
#include "core/strings.hpp"
#include "io/aliases.hpp"
#include "io/component_registry.hpp"
#include "io/repository.hpp"
#include "io/safetensors.hpp"
#include "pipeline/host_components.hpp"
#include "plugin/components.hpp"

namespace yeto::app {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;
using namespace yeto::io;

bool expects_weights(const ComponentInfo& c) {
  const std::string& n = c.class_name;
  return n.find("Scheduler") == std::string::npos && n.find("Tokenizer") == std::string::npos &&
         n.find("ImageProcessor") == std::string::npos && n.find("FeatureExtractor") == std::string::npos;
}

std::string scalar_text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

json config_summary(const json& cfg, std::size_t max_keys) {
  json out = json::object();
  for (const auto& [k, v] : cfg.items()) {
    if (out.size() >= max_keys) break;
    if (k.empty() || k[0] == '_') continue;
    if (v.is_primitive() || (v.is_array() && v.size() <= 8)) out[k] = v;
  }
  return out;
}

struct Inspection {
  json j = json::object();
  int exit_code = 0;
  std::string first_error;
};

json tensors_json(const std::vector<const SafetensorsFile*>& files, std::uint64_t& total_bytes, std::size_t& count) {
  std::map<std::string, std::size_t> dtypes;
  total_bytes = 0;
  count = 0;
  for (const auto* f : files)
    for (const auto& t : f->tensors()) {
      ++dtypes[dtype_name(t.dtype)];
      total_bytes += t.nbytes;
      ++count;
    }
  return json(dtypes);
}

Inspection inspect_repo(const DiffusersRepo& repo, bool deep) {
  Inspection r;
  r.j["pipeline_class"] = repo.pipeline_class();
  r.j["single_model"] = repo.single_model();
  json comps = json::array();
  for (const auto& c : repo.components()) {
    json cj = {{"name", c.name}, {"library", c.library}, {"class_name", c.class_name},
               {"dir", c.dir.string()}, {"registered", plugin::ComponentRegistry::global().has(c.class_name)},
               {"kind", plugin::ComponentRegistry::global().kind(c.class_name)},
               {"origin", plugin::ComponentRegistry::global().origin(c.class_name)}};
    cj["config_file"] = c.config_file.empty() ? "" : c.config_file.filename().string();
    cj["config"] = config_summary(c.config, 12);
    json tok = json::array();
    for (const auto& f : c.tokenizer_files) tok.push_back(f.filename().string());
    cj["tokenizer_files"] = tok;
    cj["variants"] = c.variants;
    std::string status = "ok";
    try {
      if (c.has_weights || (!repo.variant().empty() && expects_weights(c))) {
        const WeightSource w = WeightSource::open(c.dir, repo.variant());
        if (deep) w.validate();
        std::vector<SafetensorsFile> files;
        std::vector<const SafetensorsFile*> ptrs;
        for (const auto& f : w.files()) files.push_back(SafetensorsFile::open(f));
        for (const auto& f : files) ptrs.push_back(&f);
        std::uint64_t bytes = 0;
        std::size_t count = 0;
        json files_j = json::array();
        for (const auto& f : w.files()) files_j.push_back(f.filename().string());
        cj["weights"] = {{"files", files_j},
                         {"sharded", !w.index_file().empty()},
                         {"dtypes", tensors_json(ptrs, bytes, count)},
                         {"tensors", count},
                         {"bytes", bytes}};
      } else if (expects_weights(c)) {
        throw Error("component '" + c.name + "' (" + c.class_name + ") has no safetensors weights in " + c.dir.string(),
                    ExitCode::bad_input);
      }
    } catch (const Error& e) {
      status = e.what();
      if (r.exit_code == 0) {
        r.exit_code = e.exit_code();
        r.first_error = e.what();
      }
    }
    cj["validation"] = status;
    comps.push_back(std::move(cj));
  }
  r.j["components"] = comps;
  return r;
}

void print_text(const json& j) {
  std::ostringstream o;
  o << "model      " << j["spec"].get<std::string>() << "\n";
  if (j.contains("alias")) {
    o << "alias      " << j["alias"]["alias"].get<std::string>() << " -> " << j["alias"]["hub_id"].get<std::string>()
      << " (family " << j["alias"]["family"].get<std::string>() << ", plugin " << j["alias"]["plugin"].get<std::string>()
      << ")\n";
  }
  if (j["local"].get<bool>()) {
    o << "source     local directory " << j["path"].get<std::string>() << "\n";
  } else {
    o << "source     " << j["id"].get<std::string>() << " revision " << j["revision"].get<std::string>() << "\n"
      << "commit     " << j["commit"].get<std::string>() << "\n"
      << "snapshot   " << j["path"].get<std::string>() << "\n";
  }
  if (j.contains("tensors")) {  // a single safetensors file
    for (const auto& t : j["tensors"])
      o << "  " << t["name"].get<std::string>() << "  " << t["dtype"].get<std::string>() << " "
        << t["shape"].dump() << "  " << t["bytes"].get<std::uint64_t>() << " B\n";
    o << j["tensors"].size() << " tensors, " << j["bytes"].get<std::uint64_t>() << " bytes\n";
  } else {
    o << "pipeline   " << j["pipeline_class"].get<std::string>() << (j["single_model"].get<bool>() ? " (single model)" : "")
      << "\n";
    for (const auto& c : j["components"]) {
      const std::string name = c["name"].get<std::string>().empty() ? "(model)" : c["name"].get<std::string>();
      o << "\n" << name << ": " << c["class_name"].get<std::string>();
      if (!c["library"].get<std::string>().empty()) o << " [" << c["library"].get<std::string>() << "]";
      const std::string origin = c.value("origin", std::string());
      o << (c["registered"].get<bool>()
                ? "  implemented (" + c["kind"].get<std::string>() +
                      (origin.empty() || origin == "host" ? std::string() : ", served by " + origin) + ")"
                : "  no implementation registered")
        << "\n";
      if (!c["config_file"].get<std::string>().empty()) {
        std::vector<std::string> kv;
        for (const auto& [k, v] : c["config"].items()) kv.push_back(k + "=" + scalar_text(v));
        o << "  config   " << c["config_file"].get<std::string>() << ": " << join(kv, ", ") << "\n";
      }
      if (!c["tokenizer_files"].empty()) {
        std::vector<std::string> f = c["tokenizer_files"];
        o << "  tokenizer " << join(f, ", ") << "\n";
      }
      if (c.contains("weights")) {
        const auto& w = c["weights"];
        std::vector<std::string> dt;
        for (const auto& [k, v] : w["dtypes"].items()) dt.push_back(k + " x" + std::to_string(v.get<std::size_t>()));
        o << "  weights  " << w["tensors"].get<std::size_t>() << " tensors (" << join(dt, ", ") << "), "
          << w["bytes"].get<std::uint64_t>() << " bytes in " << w["files"].size() << " file(s)"
          << (w["sharded"].get<bool>() ? ", sharded" : "") << "\n";
      }
      if (!c["variants"].empty()) {
        std::vector<std::string> v = c["variants"];
        o << "  variants " << join(v, ", ") << "\n";
      }
      o << "  valid    " << c["validation"].get<std::string>() << "\n";
    }
  }
  o << "\nvalidation " << j["validation"].get<std::string>() << "\n";
  std::cout << o.str();
}

// `inspect --memory`: the expected peak of the run the config describes, by part, and the same
// run with and without activation checkpointing and block swap, and with fp8 storage.
int run_memory(CommandContext& ctx) {
  std::vector<config::Override> overrides = ctx.args().overrides;
  if (!ctx.positionals().empty()) overrides.push_back({"model.id", ctx.positionals().front(), "PATH|ID"});
  memory::RunShape run = memory_run_shape(ctx);
  const bool cuda = run.backend == memory::Backend::cuda;
  const std::string precision = cuda && ctx.config().get_string("model.precision") == "auto" ? "bf16" : "";
  const memory::Inventory inv = build_memory_inventory(ctx.args().config_file, overrides, precision);
  const memory::Breakdown b = memory::estimate(inv, run);
  // The variants: checkpointing off / every block, block swap none / half the blocks, storage.
  json variants = json::array();
  std::ostringstream t;
  t << "\n  variant                                  " << (cuda ? "device peak" : "host peak") << "\n";
  const int half = static_cast<int>(b.blocks / 2);
  for (const char* storage : {"auto", "fp8"})
    for (const bool ck : {false, true})
      for (const int swap : {0, run.block_swap > 0 ? run.block_swap : half}) {
        if (swap > 0 && !cuda && swap != run.block_swap) continue;  // swapping saves nothing on the CPU
        memory::RunShape v = run;
        v.storage = storage;
        v.checkpointing = ck;
        v.checkpointing_every = 1;
        v.block_swap = swap;
        const auto e = memory::estimate(inv, v);
        const double peak = cuda ? e.device_bytes : e.host_bytes;
        variants.push_back({{"storage", storage}, {"checkpointing", ck}, {"block_swap", swap}, {"host_bytes", e.host_bytes},
                            {"device_bytes", e.device_bytes}});
        char line[160];
        std::snprintf(line, sizeof line, "  storage %-5s checkpointing %-3s block swap %-4d %14s\n",
                      std::string(storage) == "auto" ? inv.compute_dtype.c_str() : "fp8", ck ? "on" : "off", swap,
                      memory::format_bytes(peak).c_str());
        t << line;
      }
  if (ctx.has("json")) {
    json j = b.to_json();
    j["model"] = inv.model;
    j["compute_dtype"] = inv.compute_dtype;
    j["tokens"] = inv.tokens.to_json();
    j["variants"] = variants;
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << memory::describe(inv, run, b) << t.str();
  return 0;
}

int run_inspect(CommandContext& ctx) {
  if (ctx.has("memory")) return run_memory(ctx);
  if (ctx.has("aliases")) {
    if (ctx.has("markdown")) {
      std::cout << aliases_markdown();
      return 0;
    }
    if (ctx.has("json")) {
      json a = json::array();
      for (const auto& m : model_aliases())
        a.push_back({{"alias", m.alias}, {"hub_id", m.hub_id}, {"family", m.family},
                     {"description", m.description}});
      std::cout << a.dump(2) << "\n";
      return 0;
    }
    for (const auto& m : model_aliases())
      std::cout << m.alias << "  " << m.hub_id << "  (" << m.family << ")\n";
    return 0;
  }
  if (ctx.positionals().empty()) throw UsageError("inspect needs a model: a directory, an org/name id or an alias");
  const config::Config& cfg = ctx.config();
  const std::string spec = ctx.positionals().front();
  const std::string revision = ctx.has("revision") ? ctx.value("revision") : cfg.get_string("model.revision");
  const HubCache cache = hub_cache(cfg.get_path("model.hub_cache"));
  const bool as_json = ctx.has("json");

  json j = {{"spec", spec}};
  int code = 0;
  std::string error;
  try {
    std::error_code ec;
    if (fs::is_regular_file(spec, ec)) {
      const SafetensorsFile f = SafetensorsFile::open(spec);
      j["local"] = true;
      j["path"] = fs::absolute(spec, ec).string();
      json ts = json::array();
      for (const auto& t : f.tensors())
        ts.push_back({{"name", t.name}, {"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"bytes", t.nbytes}});
      j["tensors"] = ts;
      j["bytes"] = f.data_size();
      j["metadata"] = f.metadata();
    } else {
      const ResolvedModel m = resolve_model(spec, revision, cache);
      j["local"] = m.repo.local;
      j["id"] = m.repo.id;
      j["revision"] = m.repo.revision;
      j["commit"] = m.repo.commit;
      j["path"] = m.repo.path.string();
      if (m.alias)
        j["alias"] = {{"alias", m.alias->alias}, {"hub_id", m.alias->hub_id}, {"family", m.alias->family}};
      const DiffusersRepo repo = DiffusersRepo::open(m.repo.path, ctx.value("variant"));
      pipeline::load_model_classes(cfg, repo);  // the family plugin's classes, if one serves the model
      Inspection in = inspect_repo(repo, true);
      j.update(in.j);
      code = in.exit_code;
      error = in.first_error;
    }
  } catch (const Error& e) {
    if (!as_json) throw;
    code = e.exit_code();
    error = e.what();
  }
  j["validation"] = code == 0 ? "ok" : "FAILED: " + error;
  if (as_json) {
    j["exit_code"] = code;
    std::cout << j.dump(2) << "\n";
    return code;
  }
  print_text(j);
  if (code != 0) std::cerr << "error: " << error << "\n";
  return code;
}

}  // namespace

void register_inspect_command(Registry& r) {
  Command c;
  c.name = "inspect";
  c.summary = "Inspect a model repository or id: commit, components, tensors, validation.";
  c.description =
      "Resolves PATH|ID offline (a local Diffusers directory, an org/name id in the Hugging Face cache, or a "
      "built-in alias), prints the resolved commit and, for every component, its class, a config summary, "
      "tensor count, dtypes and bytes, and validates every config and safetensors header (no tensor data is "
      "read). A single .safetensors file lists its tensors. Exits non-zero with the loader's error when "
      "anything is invalid. --memory prints the run's expected memory instead (docs/DESIGN.md, Memory model). --aliases lists the built-in model aliases (--markdown: the docs/MODELS.md table).";
  c.positionals = "PATH|ID";
  c.min_positionals = 0;
  c.max_positionals = 1;
  c.run_config = true;
  c.options = {{"revision", "R", "Branch, tag or commit of an org/name id (default: model.revision, 'main')."},
               {"variant", "NAME", "Weight variant to inspect (fp16, bf16); default: the plain files."},
               {"json", "", "Print as JSON (also on failure, with exit_code and validation)."},
               {"aliases", "", "List the built-in model aliases instead."},
               {"markdown", "", "With --aliases: print the Markdown table of docs/MODELS.md."},
               {"memory", "", "Print the expected host and device memory of the run the config describes (PATH|ID or model.id; "
                              "data.height/width/num_frames, train.micro_batch_size, model.storage, activation checkpointing, "
                              "train.shard), by part, with and without checkpointing, block swap and fp8 storage. Reads no weight: "
                              "a repository with only its configs is enough."},
               {"block-swap", "N", "With --memory: transformer blocks kept in host memory (default: model.block_swap, 0)."},
               {"backend", "cpu|cuda", "With --memory: the device the run uses (default: cpu, this build's)."},
               {"cached-latents", "", "With --memory: the run trains on cached latents: no media encoding (the VAE and text "
                                  "encoders count when the repository has them; list them as null in model_index.json to leave them out)."}};
  c.run = run_inspect;
  r.add(std::move(c));
}

}  // namespace yeto::app
