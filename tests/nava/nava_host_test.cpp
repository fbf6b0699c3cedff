// The nava plugin through yeto-host: built, signed and verifiable with its descriptor, and the
// NAVA-recorded cases through check-parity: the WanAVModel backbone (joint, masking_modality,
// first_frame_is_clean, no_speaker, audio_only, video_only; per-block intermediates), one training
// step (timestep draws, schedule tables, x_t, targets, predictions, NAVA's loss and its logs, the
// loss at other modality weights, every parameter's gradient), the same step with a PEFT LoRA on
// the attention projections (LoRA gradients), the RoPE tables and rotations, and the sampler (Wan
// 2.2's flow UniPC tables, three steps of the four guidance branches, x0 predictions, latents).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "support/family_host.hpp"
#include "support/process.hpp"

namespace fs = std::filesystem;

namespace {

const fs::path kParity = fs::path(YETO_TEST_FIXTURES) / "parity";

}  // namespace

TEST(NavaHost, PluginIsBuiltSignedAndVerifies) {
  nlohmann::json manifest;
  ASSERT_NO_FATAL_FAILURE(yeto::test::verify_staged_plugin("nava", &manifest));
  EXPECT_EQ(manifest.at("families"), nlohmann::json::array({"nava"})) << manifest.dump();
  EXPECT_EQ(manifest.at("aliases"), nlohmann::json::array({"nava"})) << manifest.dump();
  const auto caps = manifest.at("capabilities");
  EXPECT_NE(std::find(caps.begin(), caps.end(), "loss_step"), caps.end()) << manifest.dump();
}

// Every compared key of the three cases is produced and within its tolerance.
TEST(NavaHost, CheckParityPassesTheDiTLoraRopeAndSamplerCases) {
  yeto::test::expect_parity_cases(kParity, {"nava-dit", "nava-dit-lora", "nava-rope", "nava-sampler"});
}

// A wrong speaker position moves the outputs far beyond the tolerance: the comparison can fail.
TEST(NavaHost, ACaseWithShiftedSpeakerPositionsFails) {
  yeto::test::TempDir tmp;
  const auto copy = tmp / "nava-dit";
  fs::copy(kParity / "nava-dit", copy, fs::copy_options::recursive);
  auto text = yeto::test::read_text(copy / "case.json");
  auto c = nlohmann::json::parse(text);
  for (auto& call : c["calls"])
    if (call.value("name", "") == "backbone") call["scalar_args"]["spk_pos"] = nlohmann::json::parse("[[2, 4], []]");
  tmp.write("nava-dit/case.json", c.dump(1));
  const auto r = yeto::test::run_host({"check-parity", copy.string()});
  EXPECT_NE(r.exit_code, 0) << r.all();
  EXPECT_NE(r.out.find("FAIL  backbone.joint.audio.0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("PASS  loss "), std::string::npos) << r.out;
}
