// The torch-free half of init-model: a preset's model_index.json, configs and tokenizers.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "initmodel/init_model.hpp"
#include "support/temp_dir.hpp"
#include "text/tokenizer_components.hpp"

namespace yeto::initmodel {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

json tiny_preset() {
  return {{"description", "test"},
          {"model_index",
           {{"_class_name", "FluxPipeline"},
            {"transformer", {"diffusers", "FluxTransformer2DModel"}},
            {"text_encoder", {"transformers", "CLIPTextModel"}},
            {"text_encoder_2", {"transformers", "T5EncoderModel"}},
            {"tokenizer", {"transformers", "CLIPTokenizer"}},
            {"tokenizer_2", {"transformers", "T5TokenizerFast"}},
            {"scheduler", {"diffusers", "FlowMatchEulerDiscreteScheduler"}},
            {"image_encoder", {nullptr, nullptr}}}},
          {"components",
           {{"transformer", {{"config", {{"num_layers", 1}}}}},
            {"text_encoder", {{"config", {{"vocab_size", 1000}, {"eos_token_id", 2}}}}},
            {"text_encoder_2", {{"config", {{"vocab_size", 640}}}}},
            {"tokenizer", {{"config", {{"model_max_length", 77}}}}},
            {"tokenizer_2", {{"config", {{"model_max_length", 256}, {"legacy", true}}}}},
            {"scheduler", {{"config", {{"shift", 3.0}}}}}}}};
}

json read_json(const fs::path& p) { return json::parse(read_file(p)); }

TEST(InitModelPresetFiles, WritesModelIndexConfigsAndTokenizers) {
  TempDir t;
  const auto names = write_preset_files(t.path(), tiny_preset(), "preset 'tiny'");
  EXPECT_THAT(names, ElementsAre("scheduler", "text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2", "transformer"));
  EXPECT_EQ(read_json(t / "model_index.json")["_class_name"], "FluxPipeline");
  EXPECT_TRUE(read_json(t / "model_index.json").contains("_diffusers_version"));
  EXPECT_EQ(read_json(t / "transformer/config.json")["_class_name"], "FluxTransformer2DModel");
  EXPECT_EQ(read_json(t / "transformer/config.json")["num_layers"], 1);
  EXPECT_EQ(read_json(t / "text_encoder/config.json")["architectures"], json({"CLIPTextModel"}));
  EXPECT_EQ(read_json(t / "scheduler/scheduler_config.json")["_class_name"], "FlowMatchEulerDiscreteScheduler");
  EXPECT_FALSE(fs::exists(t / "image_encoder"));
  // Tokenizers sized to their text encoders, loadable as pipeline components.
  const auto clip = text::load_tokenizer(t / "tokenizer", "CLIPTokenizer");
  EXPECT_EQ(clip->vocab_size(), 1000);
  EXPECT_EQ(clip->model_max_length(), 77);
  const auto t5 = text::load_tokenizer(t / "tokenizer_2", "T5TokenizerFast");
  EXPECT_EQ(t5->vocab_size(), 640);
  EXPECT_EQ(t5->model_max_length(), 256);
  EXPECT_EQ(read_json(t / "tokenizer_2/tokenizer_config.json")["tokenizer_class"], "T5TokenizerFast");
}

TEST(InitModelPresetFiles, MalformedPresetsNameTheKey) {
  auto fails_with = [](json preset, const std::string& what) {
    TempDir t;
    try {
      write_preset_files(t.path(), preset, "preset 'tiny'");
      ADD_FAILURE() << "accepted a preset that should fail with: " << what;
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(what));
      EXPECT_THAT(e.what(), HasSubstr("preset 'tiny'"));
    }
  };
  json p = tiny_preset();
  p["components"]["text_encoder"]["config"].erase("vocab_size");
  fails_with(p, "components.text_encoder.config has no \"vocab_size\"");
  p = tiny_preset();
  p["components"]["text_encoder"]["config"]["eos_token_id"] = 5;
  fails_with(p, "components.text_encoder.config.eos_token_id is 5");
  p = tiny_preset();
  p["components"]["vea"] = {{"config", json::object()}};
  fails_with(p, "components.vea is not in model_index");
  p = tiny_preset();
  p["components"].erase("transformer");
  fails_with(p, "components.transformer (FluxTransformer2DModel) has no config");
  p = tiny_preset();
  p["model_index"]["vae"] = {"diffusers"};
  fails_with(p, "model_index.vae must be a [library, class] pair");
  p = tiny_preset();
  p["components"]["transformer"]["weights"] = "identity";
  fails_with(p, "components.transformer.weights must be \"pixel-codec\"");
  fails_with(json::array(), "a preset must be a JSON object");
}

}  // namespace
}  // namespace yeto::initmodel
