// The hunyuan3d plugin through yeto-host: built, signed and verifiable, and the hy3dshape-recorded
// cases through check-parity: the DiT (eval and train-mode forward, loss, every parameter's
// gradient including the MoE gates' auxiliary-loss part, the aux losses, the flow-matching
// objective), the sampler (tables, the guided loop, the pipeline loop) and the ShapeVAE decode to
// an occupancy grid; the DINOv2 image conditioner and its preprocessing.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "support/family_host.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;

namespace {

const fs::path kParity = fs::path(YETO_TEST_FIXTURES) / "parity";
// The plugin asks for its licence to be acknowledged (Tencent Hunyuan community licence).
const std::vector<std::string> kAccept = {"--set", "plugins.accept_licenses=[\"hunyuan3d\"]"};

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

// check-parity over `names`: each case supported, passing, and comparing every key of its compare
// table except the recorded inputs to the loss (loss_target).
void expect_cases_pass(const std::vector<std::string>& names) {
  yeto::test::expect_parity_cases(kParity, names, kAccept, {"loss_target"});
}

}  // namespace

TEST(Hunyuan3DHost, PluginIsBuiltSignedAndVerifies) {
  const auto so = (yeto::test::stage_plugins() / "hunyuan3d.so").string();
  const auto not_acknowledged = yeto::test::run_host({"plugins", "verify", so});
  EXPECT_EQ(not_acknowledged.exit_code, 27) << not_acknowledged.all();  // license not acknowledged
  std::vector<std::string> args = {"plugins", "verify", so};
  args.insert(args.end(), kAccept.begin(), kAccept.end());
  const auto verified = yeto::test::run_host(args);
  EXPECT_EQ(verified.exit_code, 0) << verified.all();
  const auto manifest =
      nlohmann::json::parse(yeto::test::read_text(yeto::test::stage_plugins() / "hunyuan3d.yeto.json"));
  EXPECT_EQ(manifest.at("families"), nlohmann::json::array({"hunyuan3d"})) << manifest.dump();
  EXPECT_EQ(manifest.at("aliases"), nlohmann::json::array({"hunyuan3d-21"})) << manifest.dump();
  EXPECT_EQ(manifest.at("license").at("must_acknowledge"), true) << manifest.dump();
  EXPECT_TRUE(contains(manifest.at("license").at("notice").get<std::string>(), "non-commercial")) << manifest.dump();
}

TEST(Hunyuan3DHost, LicenceNotAcknowledgedIsRefusedBeforeTheLibraryIsOpened) {
  // The plugin's manifest next to a file that is no shared library at all (unsigned, allowed as a
  // development override): were it opened, the error would be the loader's. Not acknowledged, the
  // licence refusal comes first (from the manifest alone), naming the key to set; acknowledged,
  // the same setup gets as far as the library. The case is a copy of hunyuan3d-dit that names its
  // plugin (an unsigned plugin is used only when named).
  yeto::test::TempDir tmp;
  tmp.write("plugins/hunyuan3d.so", "not a shared library\n");
  fs::copy_file(yeto::test::stage_plugins() / "hunyuan3d.yeto.json", tmp / "plugins/hunyuan3d.yeto.json");
  fs::copy(kParity / "hunyuan3d-dit", tmp / "case");
  auto case_json = nlohmann::json::parse(yeto::test::read_text(tmp / "case/case.json"));
  case_json["plugin"] = "hunyuan3d";
  fs::permissions(tmp / "case/case.json", fs::perms::owner_write, fs::perm_options::add);
  tmp.write("case/case.json", case_json.dump());
  const std::vector<std::string> dev = {"--set", "plugins.dirs=" + (tmp / "plugins").string(), "--allow-unsigned-plugins"};
  std::vector<std::string> args = {"check-parity", (tmp / "case").string(), "--json"};
  args.insert(args.end(), dev.begin(), dev.end());
  const auto refused = yeto::test::run_host(args);
  EXPECT_NE(refused.exit_code, 0) << refused.all();
  const auto error = nlohmann::json::parse(refused.out).at("cases").at(0).at("error").get<std::string>();
  EXPECT_TRUE(contains(error, "acknowledge its license")) << error;
  EXPECT_TRUE(contains(error, "plugins.accept_licenses")) << error;
  EXPECT_TRUE(contains(error, "European Union, the United Kingdom or South Korea")) << error;
  EXPECT_FALSE(contains(refused.all(), "is used under its licence")) << refused.all();

  args.insert(args.end(), kAccept.begin(), kAccept.end());
  const auto opened = yeto::test::run_host(args);
  EXPECT_NE(opened.exit_code, 0) << opened.all();
  const auto load_error = nlohmann::json::parse(opened.out).at("cases").at(0).at("error").get<std::string>();
  EXPECT_FALSE(contains(load_error, "acknowledge its license")) << load_error;
  EXPECT_TRUE(contains(load_error, "cannot be opened")) << load_error;
}

TEST(Hunyuan3DHost, LicenceAcknowledgedPrintsTheNoticeAtLoad) {
  std::vector<std::string> args = {"check-parity", (kParity / "hunyuan3d-dit").string()};
  args.insert(args.end(), kAccept.begin(), kAccept.end());
  const auto r = yeto::test::run_host(args);
  EXPECT_EQ(r.exit_code, 0) << r.all();
  EXPECT_TRUE(contains(r.all(), "plugin 'hunyuan3d' is used under its licence")) << r.all();
  EXPECT_TRUE(contains(r.all(), "Tencent Hunyuan 3D 2.1 Community License")) << r.all();
}

TEST(Hunyuan3DHost, CheckParityPassesEveryHunyuan3DAndDinov2Case) {
  // The sampler case: hy3dshape's scheduler tables, the pipeline's schedules (the dt = 0 last
  // step), the guided Euler loop and the whole pipeline loop with the tiny DiT. The ShapeVAE
  // case: latents / scale_factor, the decoder transformer and the occupancy logits on the
  // VanillaVolumeDecoder grid (loaded from a state dict that also holds the unused encoder).
  // The DINOv2 conditioner: the model at its native size, bicubic position tables (up, down,
  // rectangular), the mask token, the SwiGLU variant (a second model of the case) and the
  // conditioner end to end; its preprocessing (antialiased resize, round-half-even crop).
  expect_cases_pass({"hunyuan3d-dit", "hunyuan3d-sampler", "hunyuan3d-shapevae-decode", "dinov2-encoder",
                     "dinov2-preprocess"});
}
