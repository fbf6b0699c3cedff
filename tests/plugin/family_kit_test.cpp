// The torch-free half of the family kit: the family file (yeto/family/description.hpp), the
// component config reader and the shared generate-request settings (yeto/family/config.hpp).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "yeto/family/config.hpp"
#include "yeto/family/description.hpp"

namespace {

using nlohmann::json;
using testing::HasSubstr;
using yeto::family::ConfigReader;
using yeto::family::FamilyDescription;

// A small family file: two components of the model_index, a kit-written text encoder, two presets.
json family_file() {
  return json::parse(R"({
    "plugin": "toy", "model": "Toy", "layout": "a Toy repository has transformer, text_encoder and scheduler",
    "latents": {"scaling_factor": 0.5, "shift_factor": 0.25},
    "max_sequence_length": {"default": 64, "max": 128},
    "components": [
      {"name": "transformer", "classes": ["ToyTransformer"], "nullable": false},
      {"name": "text_encoder", "classes": ["CLIPTextModel"]},
      {"name": "extra", "classes": ["Extra"], "optional": true},
      {"name": "scheduler", "classes": ["FlowMatchEulerDiscreteScheduler"], "nullable": false}
    ],
    "lora_targets": {"auto": ["to_q", "to_v"], "attention": ["to_q", "to_k", "to_v", "to_out.0"]},
    "model_index": {"_class_name": "ToyPipeline", "transformer": ["diffusers", "ToyTransformer"],
                    "text_encoder": ["transformers", "CLIPTextModel"],
                    "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"]},
    "configs": {
      "transformer": {"_class_name": "ToyTransformer", "layers": 2, "out_channels": null, "width": 8},
      "text_encoder": {"kit": "clip_text", "shape": {"hidden": 8, "layers": 1, "heads": 2, "intermediate": 16}},
      "scheduler": {"shift": 1.0}
    },
    "presets": {
      "tiny": {"description": "the defaults"},
      "wide": {"description": "wider, with an extra component",
               "model_index": {"extra": ["diffusers", "Extra"]},
               "configs": {"transformer": {"width": 32},
                           "text_encoder": {"shape": {"hidden": 16}, "with": {"max_position_embeddings": 32}},
                           "extra": {"size": 3}}}
    }
  })");
}

FamilyDescription parse(const json& j) { return FamilyDescription::parse(j.dump(), "toy.family.json"); }

// The message of the std::invalid_argument `f` throws ("" when it throws none).
template <class F>
std::string refusal(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(FamilyFile, DescribesTheFamilyAndItsPresetsAreMergePatchesOverTheDefaults) {
  const auto d = parse(family_file());
  EXPECT_EQ(d.plugin(), "toy");
  EXPECT_EQ(d.model(), "Toy");
  EXPECT_EQ(d.denoiser(), "transformer");
  EXPECT_DOUBLE_EQ(d.scaling_factor(), 0.5);
  EXPECT_DOUBLE_EQ(d.shift_factor(), 0.25);
  EXPECT_EQ(d.max_sequence_length(), 64);
  EXPECT_EQ(d.max_sequence_length_limit(), 128);
  ASSERT_EQ(d.components().size(), 4u);
  EXPECT_TRUE(d.components()[2].optional);
  EXPECT_FALSE(d.components()[3].nullable);

  const auto& tiny = d.presets().at("tiny");
  EXPECT_EQ(tiny.at("description"), "the defaults");
  EXPECT_EQ(tiny.at("model_index"), family_file()["model_index"]);
  const auto& t = tiny.at("components").at("transformer").at("config");
  EXPECT_EQ(t.at("width"), 8);
  EXPECT_TRUE(t.contains("out_channels") && t.at("out_channels").is_null());  // a default null stays
  EXPECT_FALSE(tiny.at("components").contains("extra"));
  const auto& clip = tiny.at("components").at("text_encoder").at("config");
  EXPECT_EQ(clip, yeto::family::clip_text_config({8, 1, 2, 16}));

  const auto& wide = d.presets().at("wide");
  EXPECT_EQ(wide.at("model_index").at("extra"), json::array({"diffusers", "Extra"}));
  EXPECT_EQ(wide.at("components").at("transformer").at("config").at("width"), 32);
  EXPECT_EQ(wide.at("components").at("transformer").at("config").at("layers"), 2);
  const auto& wide_clip = wide.at("components").at("text_encoder").at("config");
  EXPECT_EQ(wide_clip.at("hidden_size"), 16);
  EXPECT_EQ(wide_clip.at("num_hidden_layers"), 1);
  EXPECT_EQ(wide_clip.at("max_position_embeddings"), 32);
  EXPECT_EQ(wide.at("components").at("extra").at("config"), json({{"size", 3}}));
}

TEST(FamilyFile, PlansRepositoriesAndResolvesLoraTargetsFromItsSets) {
  const auto d = parse(family_file());
  auto index = family_file()["model_index"];
  const auto plan = d.plan("/m", index);
  EXPECT_EQ(plan.at("family"), "toy");
  // The description's denoiser is marked as such, whatever its name (the host folds adapters into it).
  EXPECT_EQ(plan.at("components").at("transformer"),
            json({{"class", "ToyTransformer"}, {"dir", "/m/transformer"}, {"kind", "denoiser"}}));
  EXPECT_FALSE(plan.at("components").contains("extra"));
  index["text_encoder"] = {nullptr, nullptr};
  EXPECT_TRUE(d.plan("/m", index).at("components").at("text_encoder").is_null());
  index["transformer"] = {nullptr, nullptr};
  EXPECT_THAT(refusal([&] { d.plan("/m", index); }), HasSubstr("'transformer' is null"));
  auto no_scheduler = family_file()["model_index"];
  no_scheduler.erase("scheduler");
  EXPECT_EQ(refusal([&] { d.plan("/m", no_scheduler); }),
            "/m/model_index.json: no 'scheduler' component; a Toy repository has transformer, text_encoder and "
            "scheduler");

  EXPECT_EQ(d.lora_targets("auto").patterns, (std::vector<std::string>{"to_q", "to_v"}));
  EXPECT_EQ(d.lora_targets(nullptr).patterns, (std::vector<std::string>{"to_q", "to_v"}));
  EXPECT_EQ(d.lora_targets("attention").patterns.size(), 4u);
  EXPECT_TRUE(d.lora_targets("all-linear").all_linear);
  EXPECT_THROW(d.lora_targets(json::array()), std::invalid_argument);
}

TEST(FamilyFile, PlansCarryTheMemoryGeometryWithTheDefaultTextLength) {
  json f = family_file();
  const json index = {{"_class_name", "ToyPipeline"}, {"transformer", {"diffusers", "ToyTransformer"}},
                      {"text_encoder", {"transformers", "CLIPTextModel"}},
                      {"scheduler", {"diffusers", "FlowMatchEulerDiscreteScheduler"}}};
  EXPECT_FALSE(parse(f).plan("/m", index).contains("memory"));  // none declared: none planned
  f["memory"] = {{"token_pixels", 16}, {"attention", "self_cross"}, {"per_sample_linears", {"norm.linear"}}};
  const json m = parse(f).plan("/m", index).at("memory");
  EXPECT_EQ(m.at("token_pixels"), 16);
  EXPECT_EQ(m.at("attention"), "self_cross");
  EXPECT_EQ(m.at("text_tokens"), 64);  // max_sequence_length.default
  f["memory"]["attention"] = "cross";
  EXPECT_THAT(refusal([&] { parse(f); }), HasSubstr("toy.family.json: 'memory.attention' must be"));
  f["memory"] = {{"token_pixels", -2}};
  EXPECT_THAT(refusal([&] { parse(f); }), HasSubstr("'memory.token_pixels' must be a non-negative integer"));
}

TEST(FamilyFile, RefusesWhatWouldNotBuildNamingTheFileAndKey) {
  EXPECT_THAT(refusal([] { FamilyDescription::parse("{not json", "toy.family.json"); }),
              HasSubstr("toy.family.json: invalid JSON"));
  auto cases = std::vector<std::pair<std::function<void(json&)>, std::string>>{
      {[](json& j) { j.erase("layout"); }, "toy.family.json: no 'layout'"},
      {[](json& j) { j["components"][1]["classes"] = json::array(); }, "components[1].classes must be a non-empty"},
      {[](json& j) { j["denoiser"] = "unet"; }, "the denoiser 'unet' is not one of the components"},
      {[](json& j) { j["lora_targets"].erase("attention"); }, "lora_targets: no 'attention'"},
      {[](json& j) { j["configs"]["text_encoder"]["kit"] = "bert"; }, "unknown kit config 'bert'"},
      {[](json& j) { j["configs"]["text_encoder"]["shape"]["hiden"] = 8; }, "unknown key 'hiden'"},
      {[](json& j) { j["configs"]["text_encoder"]["shape"].erase("heads"); }, "shape: no 'heads'"},
      {[](json& j) { j["configs"].erase("scheduler"); }, "presets.tiny: no config for the component 'scheduler'"},
      {[](json& j) { j["presets"]["tiny"]["configs"] = {{"vae", json::object()}}; },
       "presets.tiny: configs.vae is not a component of the preset's model_index"},
      {[](json& j) { j["presets"]["tiny"]["weights"] = {{"vae", "pixel-codec"}}; },
       "presets.tiny: weights.vae is not a component of the preset's model_index"},
      {[](json& j) { j["presets"]["tiny"]["weights"] = {{"transformer", 1}}; }, "presets.tiny: weights.transformer must be a string"},
      {[](json& j) { j["presets"]["tiny"].erase("description"); }, "presets.tiny: no 'description'"},
      {[](json& j) { j["max_sequence_length"]["max"] = -1; }, "'max_sequence_length.max' must be a non-negative"},
      {[](json& j) { j["latents"]["scaling_factor"] = "big"; }, "'latents.scaling_factor' must be a number"},
  };
  for (auto& [mutate, message] : cases) {
    auto j = family_file();
    mutate(j);
    EXPECT_THAT(refusal([&] { parse(j); }), HasSubstr(message)) << j.dump();
  }
}

TEST(ConfigReader, ReadsTypedKeysWithFallbacksAndNamesTheBadKey) {
  const json cfg = {{"layers", 4},      {"eps", 1e-6},     {"bias", true},  {"act", "gelu"},
                    {"dims", {1, 2, 3}}, {"gone", nullptr}, {"flags", {true, false}}, {"names", {"a", "b"}},
                    {"scales", {0.5, 2}}};
  const ConfigReader in(cfg, "ToyTransformer config");
  EXPECT_EQ(in.integer("layers", 1), 4);
  EXPECT_EQ(in.integer("gone", 7), 7);
  EXPECT_EQ(in.integer("absent", 9), 9);
  EXPECT_DOUBLE_EQ(in.number("eps", 0.0), 1e-6);
  EXPECT_DOUBLE_EQ(in.number("layers", 0.0), 4.0);
  EXPECT_TRUE(in.boolean("bias", false));
  EXPECT_EQ(in.string("act", ""), "gelu");
  EXPECT_EQ(in.integers("dims", {}), (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(in.booleans("flags", {}), (std::vector<bool>{true, false}));
  EXPECT_EQ(in.strings("names", {}), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(in.numbers("scales", {}), (std::vector<double>{0.5, 2.0}));
  EXPECT_TRUE(in.present("layers"));
  EXPECT_FALSE(in.present("gone"));

  EXPECT_EQ(refusal([&] { in.integer("eps", 0); }), "ToyTransformer config: 'eps' must be an integer, got 1e-06");
  EXPECT_EQ(refusal([&] { in.boolean("act", false); }), "ToyTransformer config: 'act' must be true or false, got \"gelu\"");
  EXPECT_EQ(refusal([&] { in.string("layers", ""); }), "ToyTransformer config: 'layers' must be a string, got 4");
  EXPECT_EQ(refusal([&] { in.integers("names", {}); }),
            "ToyTransformer config: 'names' must be a list of integers, got [\"a\",\"b\"]");
  EXPECT_EQ(refusal([&] { in.require("gone", " (the width)"); }), "ToyTransformer config: 'gone' is required (the width)");
  EXPECT_EQ(refusal([] { ConfigReader(json::array(), "ToyTransformer config"); }),
            "ToyTransformer config: expected a JSON object");
}

TEST(GenerateSettings, SharedKeysFollowThePipelinesRules) {
  using yeto::family::GenerateRules;
  using yeto::family::GenerateSettings;
  using yeto::family::read_generate_settings;
  using yeto::family::RequestReader;
  GenerateSettings s;
  s.steps = 20;
  read_generate_settings(RequestReader(json{{"prompts", "one prompt"}, {"seed", 5}, {"guidance", 4.5}}), {}, s);
  EXPECT_EQ(s.prompts, std::vector<std::string>{"one prompt"});
  EXPECT_EQ(s.negative_prompts, std::vector<std::string>{""});
  EXPECT_EQ(s.seed, 5u);
  EXPECT_EQ(s.steps, 20);  // absent: the family's default stays
  EXPECT_DOUBLE_EQ(s.guidance, 4.5);

  const json two = {{"prompts", {"a", "b"}}, {"negative_prompts", {"blurry"}}};
  GenerateRules strict;
  EXPECT_EQ(refusal([&] { read_generate_settings(RequestReader(two), strict, s); }),
            "generate request: 'negative_prompts' has 1 entries for 2 prompts (give one per prompt)");
  GenerateRules broadcast;
  broadcast.single_negative_for_all = true;
  read_generate_settings(RequestReader(two), broadcast, s);
  EXPECT_EQ(s.negative_prompts, (std::vector<std::string>{"blurry", "blurry"}));
  GenerateRules none;
  none.negative_prompts = false;
  read_generate_settings(RequestReader(two), none, s);
  EXPECT_EQ(s.negative_prompts, (std::vector<std::string>{"", ""}));

  const GenerateRules limits{16, 512, "the T5 limit"};
  EXPECT_THAT(refusal([&] { read_generate_settings(RequestReader(json{{"prompts", {"a"}}, {"height", 8}}), limits, s); }),
              HasSubstr("'height' must be at least 16"));
  EXPECT_EQ(refusal([&] {
              read_generate_settings(RequestReader(json{{"prompts", {"a"}}, {"max_sequence_length", 513}}), limits, s);
            }),
            "generate request: 'max_sequence_length' cannot be greater than 512 (the T5 limit), got 513");
  EXPECT_THAT(refusal([&] { read_generate_settings(RequestReader(json{{"prompts", json::array()}}), limits, s); }),
              HasSubstr("'prompts' must be a string or a non-empty array of strings"));
}

}  // namespace
