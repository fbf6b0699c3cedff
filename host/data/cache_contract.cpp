#include "data/cache_contract.hpp"

#include <cmath>

#include <nlohmann/json.hpp>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/strings.hpp"
#include "data/tensor_ref.hpp"

namespace yeto::data {
namespace fs = std::filesystem;
using nlohmann::json;

CacheProfile preprocessing_profile(const DataOptions& o) {
  CacheProfile p;
  p.height = o.height;
  p.width = o.width;
  p.num_frames = o.num_frames;
  p.resize_mode = resize_mode_name(o.resize_mode);
  p.fps = o.fps;
  return p;
}

json contract_to_json(const CacheProfile& p, std::int64_t rows) {
  json j;
  j["format"] = kCacheFormat;
  j["version"] = kCacheVersion;
  j["model"] = {{"id", p.model_id}, {"commit", p.model_commit}};
  j["components"] = p.components;
  json pre = json::object();
  if (p.height) pre["height"] = *p.height;
  if (p.width) pre["width"] = *p.width;
  if (p.num_frames) pre["num_frames"] = *p.num_frames;
  if (p.resize_mode) pre["resize_mode"] = *p.resize_mode;
  if (p.fps) pre["fps"] = *p.fps;
  j["preprocessing"] = pre;
  json t = json::object();
  for (const auto& [name, spec] : p.tensors) t[name] = {{"dtype", spec.dtype}, {"shape", spec.shape}};
  j["tensors"] = t;
  j["rows"] = rows;
  j["index"] = "index.jsonl";
  j["manifest"] = "manifest.jsonl";
  return j;
}

CacheProfile contract_from_json(const json& j, const fs::path& file) {
  auto fail = [&](const std::string& why) -> CacheProfile {
    throw Error(file.string() + ": " + why + "; rebuild the cache with `yeto-host cache`", ExitCode::bad_input);
  };
  if (!j.is_object()) return fail("not a JSON object");
  if (j.value("format", std::string()) != kCacheFormat) return fail("\"format\" is not \"" + std::string(kCacheFormat) + "\"");
  if (!j.contains("version") || !j["version"].is_number_integer()) return fail("no integer \"version\"");
  if (j["version"].get<int>() > kCacheVersion)
    return fail("cache format version " + std::to_string(j["version"].get<int>()) + " is newer than this build reads (" +
                std::to_string(kCacheVersion) + ")");
  CacheProfile p;
  try {
    if (j.contains("model")) {
      p.model_id = j["model"].value("id", std::string());
      p.model_commit = j["model"].value("commit", std::string());
    }
    if (j.contains("components")) p.components = j["components"].get<std::map<std::string, std::string>>();
    if (j.contains("preprocessing")) {
      const json& pre = j["preprocessing"];
      if (pre.contains("height")) p.height = pre["height"].get<std::int64_t>();
      if (pre.contains("width")) p.width = pre["width"].get<std::int64_t>();
      if (pre.contains("num_frames")) p.num_frames = pre["num_frames"].get<std::int64_t>();
      if (pre.contains("resize_mode")) p.resize_mode = pre["resize_mode"].get<std::string>();
      if (pre.contains("fps")) p.fps = pre["fps"].get<double>();
    }
    if (j.contains("tensors"))
      for (const auto& [name, spec] : j["tensors"].items())
        p.tensors[name] = {spec.at("dtype").get<std::string>(), spec.at("shape").get<std::vector<std::int64_t>>()};
  } catch (const json::exception& e) {
    return fail(std::string("malformed field: ") + e.what());
  }
  return p;
}

std::vector<std::string> contract_mismatches(const CacheProfile& c, const CacheProfile& e) {
  std::vector<std::string> out;
  auto cmp = [&](const std::string& what, const std::string& cache, const std::string& run) {
    if (!run.empty() && cache != run) out.push_back(what + ": cache " + (cache.empty() ? "(none)" : "'" + cache + "'") + ", run '" + run + "'");
  };
  cmp("model.id", c.model_id, e.model_id);
  cmp("model.commit", c.model_commit, e.model_commit);
  for (const auto& [name, hash] : e.components) {
    auto it = c.components.find(name);
    cmp("components." + name, it == c.components.end() ? "" : it->second, hash);
  }
  auto num = [&](const std::string& what, const auto& cache, const auto& run) {
    if (run && (!cache || *cache != *run)) {
      std::string cs = cache ? std::to_string(*cache) : "(none)";
      out.push_back(what + ": cache " + cs + ", run " + std::to_string(*run));
    }
  };
  num("preprocessing.height (data.height)", c.height, e.height);
  num("preprocessing.width (data.width)", c.width, e.width);
  num("preprocessing.num_frames (data.num_frames)", c.num_frames, e.num_frames);
  if (e.resize_mode && c.resize_mode != e.resize_mode)
    out.push_back("preprocessing.resize_mode (data.resize_mode): cache " + c.resize_mode.value_or("(none)") + ", run " + *e.resize_mode);
  if (e.fps && (!c.fps || std::abs(*c.fps - *e.fps) > 1e-9))
    out.push_back("preprocessing.fps (data.fps): cache " + (c.fps ? std::to_string(*c.fps) : std::string("(none)")) + ", run " +
                  std::to_string(*e.fps));
  for (const auto& [name, spec] : e.tensors) {
    auto it = c.tensors.find(name);
    if (it == c.tensors.end()) {
      out.push_back("tensors." + name + ": not in the cache, run needs " + spec.dtype + shape_str(spec.shape));
      continue;
    }
    if (!spec.dtype.empty() && it->second.dtype != spec.dtype)
      out.push_back("tensors." + name + ".dtype: cache " + it->second.dtype + ", run " + spec.dtype);
    if (!spec.shape.empty() && it->second.shape != spec.shape)
      out.push_back("tensors." + name + ".shape: cache " + shape_str(it->second.shape) + ", run " + shape_str(spec.shape));
  }
  return out;
}

CacheProfile validate_cache_contract(const fs::path& dir, const CacheProfile& expected) {
  const fs::path file = dir / kCacheContractFile;
  std::error_code ec;
  if (!fs::is_regular_file(file, ec))
    throw Error(dir.string() + " is not a Yeto cache dataset (no " + kCacheContractFile + "); build one with `yeto-host cache`",
                ExitCode::not_found);
  json j;
  try {
    j = json::parse(read_file(file));
  } catch (const json::parse_error& e) {
    throw Error(file.string() + ": invalid JSON: " + e.what() + "; rebuild the cache with `yeto-host cache`", ExitCode::bad_input);
  }
  CacheProfile cache = contract_from_json(j, file);
  const auto diffs = contract_mismatches(cache, expected);
  if (!diffs.empty())
    throw Error(file.string() + ": the cached tensors were made for a different model, encoder or shape profile than this run:\n  " +
                    join(diffs, "\n  ") +
                    "\nRebuild the cache for this run (`yeto-host cache --config run.toml`), point data.path at a matching cache, "
                    "or set data.cache_latents / data.cache_text_embeds = false to encode on the fly",
                ExitCode::bad_input);
  return cache;
}

}  // namespace yeto::data
