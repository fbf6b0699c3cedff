// The AlphaFold 3 guard: `yeto-host sample` runs the official run_alphafold.py on the input JSON
// that --prompt names (alphafold3_runner.hpp says when and how), leaves its files, exit status and
// log in the sample's output folder and hands the best-ranked model's mmCIF to the host, which
// writes it as the sample's .cif / .pdb. Every training hook refuses: the model parameters' terms
// forbid it.
#include <torch/torch.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>
#include <yeto/plugin.hpp>

#include "alphafold3_runner.hpp"

namespace {

using nlohmann::json;
using yeto::sdk::NamedTensors;
namespace af3 = yeto::alphafold3;

class AlphaFold3Plugin : public yeto::sdk::Plugin {
 public:
  void configure(const std::string& config_json) override {
    config_ = json::parse(config_json, nullptr, false);
    if (config_.is_discarded()) config_ = json::object();
  }

  // The model "repository" is a folder whose model_index.json names AlphaFold3: it holds no
  // weights (they stay in $YETO_ALPHAFOLD3_MODEL_PARAMETERS_DIR) and no components.
  std::string load_pipeline(const std::string&, const std::string&) override { return R"({"components": {}})"; }

  void prepare(const std::string&) override { refuse("training or export (prepare)"); }
  NamedTensors trainable_parameters() override { refuse("trainable_parameters"); }
  torch::Tensor loss_step(const std::string&, const NamedTensors&, std::string&) override { refuse("loss_step"); }

  NamedTensors generate(const std::string& request_json, const NamedTensors&) override {
    const json request = json::parse(request_json);
    const auto& prompts = request.at("prompts");
    if (!prompts.is_array() || prompts.size() != 1 || !prompts[0].is_string())
      yeto::sdk::fail(YETO_ERR_INVALID_ARGUMENT, "alphafold3: give one prompt, the path of an input JSON");
    af3::Run run;
    try {
      const af3::Settings settings = af3::settings_from_config(config_);
      const af3::Folders folders = af3::folders_from_environment();
      run = af3::plan_run(settings, folders, prompts[0].get<std::string>(), request.value("output_dir", std::string()));
    } catch (const af3::Refusal& e) {
      yeto::sdk::fail(YETO_ERR_INVALID_ARGUMENT, std::string("alphafold3: ") + e.what());
    }
    yeto::sdk::Host::info("alphafold3: running run_alphafold.py on " + run.json_path.string() + "; files, exit status "
                          "and log in " + run.output_dir.string());
    const af3::Outcome out = af3::execute(run);
    if (!out.process.ok())
      yeto::sdk::fail(YETO_ERR_INTERNAL, "alphafold3: run_alphafold.py " + yeto::family::describe(out.process) +
                                             "; its log: " + run.log.string() + "\n" +
                                             yeto::family::tail_lines(run.log, 12));
    yeto::sdk::Host::info("alphafold3: run_alphafold.py finished (" + yeto::family::describe(out.process) + "), " +
                          std::to_string(out.files) + " file(s) in " + run.output_dir.string());
    NamedTensors outputs = {{"output_files", torch::tensor({static_cast<std::int64_t>(out.files)}, torch::kLong)}};
    if (!out.top_model.empty()) {
      std::ifstream in(out.top_model, std::ios::binary);
      std::ostringstream bytes;
      bytes << in.rdbuf();
      const std::string text = bytes.str();
      auto t = torch::empty({static_cast<std::int64_t>(text.size())}, torch::kUInt8);
      std::copy(text.begin(), text.end(), reinterpret_cast<char*>(t.data_ptr<std::uint8_t>()));
      outputs.emplace_back("structure_mmcif", t);
    }
    return outputs;
  }

 private:
  [[noreturn]] static void refuse(const std::string& hook) {
    yeto::sdk::fail(YETO_ERR_UNSUPPORTED, af3::training_refusal(hook));
  }

  json config_ = json::object();
};

}  // namespace

YETO_PLUGIN(AlphaFold3Plugin)
