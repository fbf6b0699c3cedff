#include "yeto/family/repository.hpp"

#include <fstream>

namespace yeto::family {

using nlohmann::json;

namespace {

double number_in(const json& j, const char* key, double fallback) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : fallback;
}

bool present(const json& plan, const char* component) {
  return plan.contains("components") && plan["components"].contains(component) &&
         !plan["components"][component].is_null();
}

json read_config(const std::string& path) { return parse_json(python_nonfinite_to_null(read_text_file(path)), path); }

}  // namespace

void PipelineConfigs::read(const std::string& model_dir, const json& plan) {
  vae_ = present(plan, "vae") ? read_config(model_dir + "/vae/config.json") : json::object();
  scheduler_ = present(plan, "scheduler") ? read_config(model_dir + "/scheduler/scheduler_config.json") : json::object();
}

std::int64_t PipelineConfigs::vae_scale_factor() const {
  const auto it = vae_.find("block_out_channels");
  if (it == vae_.end() || !it->is_array() || it->empty()) return 8;
  return std::int64_t{1} << (it->size() - 1);
}

double PipelineConfigs::vae_number(const char* key, double fallback) const { return number_in(vae_, key, fallback); }

double PipelineConfigs::scheduler_number(const char* key, double fallback) const {
  return number_in(scheduler_, key, fallback);
}

std::int64_t PipelineConfigs::scheduler_int(const char* key, std::int64_t fallback) const {
  const auto it = scheduler_.find(key);
  return it != scheduler_.end() && it->is_number_integer() ? it->get<std::int64_t>() : fallback;
}

bool PipelineConfigs::scheduler_flag(const char* key) const {
  const auto it = scheduler_.find(key);
  return it != scheduler_.end() && it->is_boolean() && it->get<bool>();
}

std::int64_t tokenizer_max_length(const std::string& model_dir, const std::string& tokenizer, std::int64_t fallback) {
  const auto path = model_dir + "/" + tokenizer + "/tokenizer_config.json";
  if (!std::ifstream(path).good()) return fallback;
  const auto t = read_json_file(path);
  const auto it = t.find("model_max_length");
  if (it == t.end() || !it->is_number_integer()) return fallback;
  const auto n = it->get<std::int64_t>();
  return n > 0 && n < 100000 ? n : fallback;
}

std::int64_t run_max_sequence_length(std::int64_t pipeline_default, std::int64_t max, const std::string& default_text) {
  const auto n = host_config_int("model.max_sequence_length", 0);
  if (n < 0 || (max > 0 && n > max))
    sdk::fail(YETO_ERR_INVALID_ARGUMENT, "model.max_sequence_length must be 0 (" + default_text + ") or " +
                                             (max > 0 ? "at most " + std::to_string(max) : std::string("positive")) +
                                             ", got " + std::to_string(n));
  return n == 0 ? pipeline_default : n;
}

std::string prepare_denoisers(const std::vector<torch::nn::Module*>& denoisers, const json& options,
                              const TuningSpec& spec) {
  const auto placement = prepare_placement(options);
  const auto tuning = parse_tuning(options);
  const auto checkpointing = run_block_checkpointing();
  for (auto* m : denoisers) {
    // "yeto::flux::FluxTransformer2DModelImpl" -> "FluxTransformer2DModel" in messages.
    std::string shown = m->name();
    if (const auto at = shown.rfind("::"); at != std::string::npos) shown = shown.substr(at + 2);
    if (shown.size() > 4 && shown.ends_with("Impl")) shown.resize(shown.size() - 4);
    check_block_sharding(*m, shown);
    apply_block_swap(*m, shown, placement.device);
    m->to(placement.device, placement.dtype);
    prepare_tuning(*m, tuning, options, spec);
    if (!set_block_checkpointing(*m, checkpointing) && checkpointing.enabled)
      sdk::Host::warn("train.activation_checkpointing: the denoiser " + m->name() +
                      " has no checkpointed blocks; it keeps every activation");
  }
  return tuning;
}

}  // namespace yeto::family
