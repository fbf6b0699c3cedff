// The check-parity framework: every scheduler fixture case passes through run_case, the
// tolerance rule, the recorded-call parser, unsupported kinds/classes, and the yeto-host
// check-parity command (exit codes 0 / 40 / non-zero for unsupported).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include <gtest/gtest.h>
#include <ATen/ATen.h>

#include "app/parity_kinds.hpp"
#include "app/plugin_parity_kinds.hpp"
#include "config/config.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/python_json.hpp"
#include "io/tensors.hpp"
#include "parity/parity.hpp"
#include "parity/pyexpr.hpp"
#include "plugin/host_api.hpp"
#include "plugin/instance.hpp"
#include "plugin/loader.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;
using namespace yeto;
using namespace yeto::parity;

namespace {

fs::path fixture(const std::string& name) { return fs::path(YETO_SOURCE_DIR) / "tests" / "fixtures" / "parity" / name; }

std::vector<std::string> scheduler_cases() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(fs::path(YETO_SOURCE_DIR) / "tests" / "fixtures" / "parity"))
    if (e.is_directory() && e.path().filename().string().rfind("scheduler-", 0) == 0)
      out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

void write_case(const fs::path& dir, const nlohmann::json& j) {
  fs::create_directories(dir);
  std::ofstream(dir / "case.json") << j.dump(2);
}

class SchedulerCase : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST(ParityFixtures, AllSevenSchedulerCasesArePresent) {
  const auto cases = scheduler_cases();
  EXPECT_EQ(cases.size(), 7u);
  for (const char* c : {"scheduler-ddpm-pixart", "scheduler-dpmsolver-pixart", "scheduler-flow-match-euler",
                        "scheduler-flow-match-euler-dynamic", "scheduler-flow-match-euler-shift3",
                        "scheduler-unipc-default", "scheduler-unipc-wan"})
    EXPECT_TRUE(fs::exists(fixture(c) / "case.json")) << c;
}

TEST_P(SchedulerCase, EveryComparedOutputIsWithinTolerance) {
  app::register_all_parity_kinds();
  const fs::path dir = fixture(GetParam());
  const CaseResult r = run_case(dir);
  EXPECT_TRUE(r.supported) << r.error;
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.kind, "scheduler");
  // Every key of case.json `compare` was produced and compared exactly once.
  CaseContext ctx(dir);
  std::multiset<std::string> compared;
  for (const auto& c : r.comparisons) compared.insert(c.name);
  for (const auto& key : ctx.compare_keys()) EXPECT_EQ(compared.count(key), 1u) << key;
  EXPECT_EQ(r.comparisons.size(), ctx.compare_keys().size());
  for (const auto& c : r.comparisons) {
    EXPECT_TRUE(c.pass) << GetParam() << " " << c.name << ": max_abs " << c.max_abs << " (atol " << c.atol
                        << ") max_rel " << c.max_rel << " (rtol " << c.rtol << ") " << c.note;
  }
  EXPECT_TRUE(r.pass());
}

INSTANTIATE_TEST_SUITE_P(Schedulers, SchedulerCase, ::testing::ValuesIn(scheduler_cases()),
                         [](const auto& param_info) {
                           std::string n = param_info.param;
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

TEST(CompareTensors, AllcloseRuleAtTheBoundary) {
  const at::Tensor e = at::tensor({1.0, -2.0, 0.0}, at::kDouble);
  const Tolerance tol{0.1, 0.01};  // rtol, atol
  // |a - e| <= atol + rtol * |e|: 0.11 for 1.0, 0.21 for -2.0, 0.01 for 0.0
  const at::Tensor ok = at::tensor({1.0 + 0.109, -2.0 - 0.209, 0.0099}, at::kDouble);
  Comparison c = compare_tensors("x", ok, e, tol);
  EXPECT_TRUE(c.pass) << c.note;
  EXPECT_NEAR(c.max_abs, 0.209, 1e-12);
  EXPECT_NEAR(c.max_rel, 0.109, 1e-12);  // relative error only over non-zero expected entries
  const at::Tensor bad = at::tensor({1.0, -2.0, 0.0101}, at::kDouble);
  c = compare_tensors("x", bad, e, tol);
  EXPECT_FALSE(c.pass);
  EXPECT_NE(c.note.find("flat index 2"), std::string::npos) << c.note;
}

TEST(CompareTensors, IntegerOutputsMustMatchExactlyWhateverTheTolerance) {
  const at::Tensor e = at::tensor({999, 500, 1}, at::kLong);
  EXPECT_TRUE(compare_tensors("t", e.clone(), e, {1.0, 10.0}).pass);
  const Comparison c = compare_tensors("t", at::tensor({999, 501, 1}, at::kLong), e, {1.0, 10.0});
  EXPECT_FALSE(c.pass);
  EXPECT_EQ(c.max_abs, 1.0);
  // A float result where an integer table is expected is a failure, not a rounding.
  EXPECT_FALSE(compare_tensors("t", e.to(at::kFloat), e, {0, 0}).pass);
}

TEST(CompareTensors, ShapeAndNonFiniteMismatchesFail) {
  const at::Tensor e = at::zeros({2, 3});
  Comparison c = compare_tensors("s", at::zeros({3, 2}), e, {1, 1});
  EXPECT_FALSE(c.pass);
  EXPECT_NE(c.note.find("shape"), std::string::npos);
  const at::Tensor with_nan = at::tensor({1.0f, NAN});
  EXPECT_TRUE(compare_tensors("n", with_nan.clone(), with_nan, {0, 0}).pass);
  EXPECT_FALSE(compare_tensors("n", at::tensor({1.0f, 2.0f}), with_nan, {1, 1}).pass);
  // 0-d against a one-element tensor is the same value.
  EXPECT_TRUE(compare_tensors("z", at::scalar_tensor(0.5, at::kDouble), at::tensor({0.5}, at::kDouble), {0, 0}).pass);
}

TEST(RecordedCalls, ParsesTheSnippetsTheFixturesUse) {
  auto stmts = py::parse("s = <fresh>; s.set_timesteps(4); ts = s.timesteps[[0, 2]]; s.scale_noise(sample, ts, noise)");
  ASSERT_EQ(stmts.size(), 4u);
  EXPECT_EQ(stmts[0].kind, py::Stmt::Kind::assign);
  EXPECT_EQ(stmts[0].value->kind, py::Expr::Kind::fresh);
  EXPECT_EQ(stmts[2].target, "ts");
  EXPECT_EQ(stmts[2].value->kind, py::Expr::Kind::index);
  EXPECT_EQ(stmts[3].value->callee->text, "s.scale_noise");

  stmts = py::parse("x = sample * s.init_noise_sigma; for i, t in enumerate(s.timesteps): "
                    "x = s.step(model_output.<i>, t, x, return_dict=False)[0]  -> loop.prev_sample.<i>");
  ASSERT_EQ(stmts.size(), 2u);
  EXPECT_EQ(stmts[1].kind, py::Stmt::Kind::for_enumerate);
  ASSERT_EQ(stmts[1].body.size(), 1u);
  EXPECT_EQ(stmts[1].body[0].record_as, "loop.prev_sample.<i>");
  EXPECT_EQ(stmts[1].body[0].value->items[0]->callee->text, "s.step");
  EXPECT_EQ(stmts[1].body[0].value->items[0]->kwargs.at(0).first, "return_dict");

  auto e = py::parse_expression("np.linspace(1.0, 1 / N, N)");
  EXPECT_EQ(e->str(), "np.linspace(1.0, 1 / N, N)");
  e = py::parse_expression("calculate_shift(packed.shape[1], 256, 4096, 0.5, 1.15)  # comment");
  EXPECT_EQ(e->items.size(), 5u);
  EXPECT_EQ(py::parse_expression("-1")->number, -1.0);
}

TEST(RecordedCalls, SyntaxErrorsNameTheSnippet) {
  try {
    py::parse("s.step(model_output.0, ");
    FAIL() << "expected a parse error";
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), ExitCode::bad_input);
    EXPECT_NE(std::string(err.what()).find("s.step(model_output.0, "), std::string::npos) << err.what();
  }
  EXPECT_THROW(py::parse("while True: pass"), Error);
  EXPECT_THROW(py::parse("x = 'unterminated"), Error);
}

TEST(PythonJson, AcceptsInfinityAndNaNLiterals) {
  const auto j = parse_python_json(R"({"a": -Infinity, "b": Infinity, "c": NaN, "d": "-Infinity", "e": [1, -Infinity]})",
                                   "test");
  EXPECT_TRUE(std::isinf(j["a"].get<double>()) && j["a"].get<double>() < 0);
  EXPECT_TRUE(std::isinf(j["b"].get<double>()) && j["b"].get<double>() > 0);
  EXPECT_TRUE(std::isnan(j["c"].get<double>()));
  EXPECT_EQ(j["d"].get<std::string>(), "-Infinity");  // inside a string it stays text
  EXPECT_TRUE(std::isinf(j["e"][1].get<double>()));
  EXPECT_THROW(parse_python_json("{\"a\": -Inf}", "test"), Error);
}

TEST(RunCase, UnknownKindIsUnsupported) {
  app::register_all_parity_kinds();
  test::TempDir tmp;
  write_case(tmp / "c", {{"case", "c"}, {"kind", "no_such_kind"}, {"class_name", "X"}});
  const CaseResult r = run_case(tmp / "c");
  EXPECT_FALSE(r.supported);
  EXPECT_FALSE(r.pass());
  EXPECT_NE(r.error.find("unsupported case kind no_such_kind"), std::string::npos) << r.error;
}

TEST(RunCase, UnknownSchedulerClassIsUnsupported) {
  app::register_all_parity_kinds();
  test::TempDir tmp;
  write_case(tmp / "c", {{"case", "c"}, {"kind", "scheduler"}, {"class_name", "EulerAncestralDiscreteScheduler"}});
  const CaseResult r = run_case(tmp / "c");
  EXPECT_FALSE(r.supported);
  EXPECT_NE(r.error.find("no implementation registered for class EulerAncestralDiscreteScheduler"), std::string::npos)
      << r.error;
}

TEST(RunCase, MissingOrMalformedCaseJsonIsAnErrorNotACrash) {
  test::TempDir tmp;
  CaseResult r = run_case(tmp / "nothing-here");
  EXPECT_FALSE(r.pass());
  EXPECT_NE(r.error.find("case.json"), std::string::npos);
  tmp.write("bad/case.json", "{not json");
  r = run_case(tmp / "bad");
  EXPECT_FALSE(r.pass());
  EXPECT_NE(r.error.find("invalid JSON"), std::string::npos) << r.error;
}

TEST(RunCase, RegisteredKindsDriveTheirCasesThroughCompare) {
  test::TempDir tmp;
  const fs::path dir = tmp / "custom";
  write_case(dir, {{"case", "custom"}, {"kind", "test_double"},
                   {"compare", {{"y", {{"rtol", 1e-6}, {"atol", 1e-6}}}}}});
  io::save_safetensors(dir / "inputs.safetensors", {{"x", at::arange(4, at::kFloat)}});
  io::save_safetensors(dir / "expected.safetensors", {{"y", at::arange(4, at::kFloat) * 2}});
  register_kind("test_double", [](const CaseContext& ctx, CaseResult& result) {
    ctx.compare("y", ctx.input("x") * 2, result);
  });
  CaseResult r = run_case(dir);
  ASSERT_EQ(r.comparisons.size(), 1u);
  EXPECT_TRUE(r.pass()) << r.error;
  register_kind("test_double", [](const CaseContext& ctx, CaseResult& result) {
    ctx.compare("y", ctx.input("x") * 3, result);
  });
  r = run_case(dir);
  EXPECT_FALSE(r.pass());
  EXPECT_EQ(r.comparisons.at(0).max_abs, 3.0);
}

TEST(PipelineHelpers, CalculateShiftIsCheckedAndUnservedHelpersAreReportedUnsupported) {
  app::register_all_parity_kinds();
  test::TempDir tmp;
  const fs::path dir = tmp / "helpers";
  nlohmann::json calls = nlohmann::json::array();
  calls.push_back({{"python", "packed = NoSuchPipeline._pack_latents(latents, 2, 16, 8, 12)"}, {"outputs", {"packed"}}});
  calls.push_back({{"python", "mu = calculate_shift(packed.shape[1], 256, 4096, 0.5, 1.15)"},
                   {"outputs", {"calculate_shift_mu"}}});
  write_case(dir, {{"case", "helpers"},
                   {"kind", "pipeline_helpers"},
                   {"class_name", "NoSuchPipeline"},
                   {"calls", calls},
                   {"compare",
                    {{"packed", {{"rtol", 0}, {"atol", 0}}}, {"calculate_shift_mu", {{"rtol", 1e-12}, {"atol", 1e-12}}}}}});
  io::save_safetensors(dir / "inputs.safetensors", {{"latents", at::zeros({2, 16, 8, 12})}});
  // 24 tokens: mu = 24 * (0.65 / 3840) + (0.5 - 256 * 0.65 / 3840)
  const double mu = 24.0 * (0.65 / 3840.0) + (0.5 - 256.0 * (0.65 / 3840.0));
  io::save_safetensors(dir / "expected.safetensors",
                       {{"packed", at::zeros({2, 24, 64})}, {"calculate_shift_mu", at::scalar_tensor(mu, at::kDouble)}});
  const CaseResult r = run_case(dir);
  EXPECT_FALSE(r.supported);
  EXPECT_NE(r.error.find("NoSuchPipeline._pack_latents"), std::string::npos) << r.error;
  ASSERT_EQ(r.comparisons.size(), 1u);
  EXPECT_EQ(r.comparisons[0].name, "calculate_shift_mu");
  EXPECT_TRUE(r.comparisons[0].pass) << r.comparisons[0].note;
  EXPECT_LT(r.comparisons[0].max_abs, 1e-15);
}

// --- the command ----------------------------------------------------------------------------

TEST(CheckParityCommand, PassingCasePrintsPassLinesAndExitsZero) {
  const auto res = test::run_host({"check-parity", fixture("scheduler-flow-match-euler").string()});
  EXPECT_EQ(res.exit_code, 0) << res.all();
  EXPECT_NE(res.out.find("PASS  init.timesteps  max_abs"), std::string::npos) << res.out;
  EXPECT_NE(res.out.find("(atol 1e-06)"), std::string::npos) << res.out;
  EXPECT_NE(res.out.find("PASS  loop.prev_sample.3"), std::string::npos) << res.out;
  EXPECT_NE(res.out.find("summary: 1 case(s): 1 passed, 0 failed, 0 unsupported"), std::string::npos) << res.out;
}

TEST(CheckParityCommand, PerturbedExpectedTensorFailsWithExitCode40) {
  test::TempDir tmp;
  const fs::path copy = tmp / "scheduler-dpmsolver-pixart";
  fs::copy(fixture("scheduler-dpmsolver-pixart"), copy, fs::copy_options::recursive);
  auto expected = io::load_safetensors(copy / "expected.safetensors");
  ASSERT_TRUE(expected.count("loop.prev_sample.3"));
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (auto& [name, t] : expected) {
    at::Tensor v = t.clone();
    if (name == "loop.prev_sample.3") v.view({-1})[5] += 0.01;
    out.emplace_back(name, v);
  }
  io::save_safetensors(copy / "expected.safetensors", out);
  const auto res = test::run_host({"check-parity", copy.string(), fixture("scheduler-flow-match-euler").string()});
  EXPECT_EQ(res.exit_code, static_cast<int>(ExitCode::parity_failed)) << res.all();
  EXPECT_NE(res.out.find("FAIL  loop.prev_sample.3"), std::string::npos) << res.out;
  EXPECT_NE(res.out.find("PASS  loop.prev_sample.2"), std::string::npos) << res.out;
  EXPECT_NE(res.out.find("1 passed, 1 failed"), std::string::npos) << res.out;
}

// Every case directory the project copies, of every kind: all pass and none is unsupported
// (the lora kind and the family plugins' pipeline helpers included). The hunyuan3d plugin's
// licence is acknowledged, as its cases need.
TEST(CheckParityCommand, EveryCopiedCasePassesAndNoneIsUnsupported) {
  std::vector<std::string> args = {"check-parity", "--set", "plugins.accept_licenses=[\"hunyuan3d\"]"};
  for (const auto& e : fs::directory_iterator(fs::path(YETO_TEST_FIXTURES) / "parity"))
    if (fs::exists(e.path() / "case.json")) args.push_back(e.path().string());
  ASSERT_GE(args.size(), 29u);
  const auto res = test::run_host(args);
  EXPECT_EQ(res.exit_code, 0) << res.all();
  EXPECT_NE(res.out.find("0 failed, 0 unsupported"), std::string::npos) << res.out;
  EXPECT_NE(res.out.find("PASS  sample_lora (lora_peft"), std::string::npos) << res.out;
  EXPECT_NE(res.out.find("PASS  packed"), std::string::npos) << res.out;
}

// The lora kind really folds the adapter in at the recorded scale: a wrong lora_alpha fails
// exactly the outputs computed with it.
TEST(CheckParityCommand, ALoraCaseWithTheWrongAlphaFails) {
  test::TempDir tmp;
  const fs::path copy = tmp / "flux-lora";
  fs::copy(fixture("flux-lora"), copy, fs::copy_options::recursive);
  auto c = nlohmann::json::parse(yeto::read_file(copy / "case.json"));
  c["lora_config"]["lora_alpha"] = 4;
  yeto::atomic_write(copy / "case.json", c.dump(2));
  auto cfg = nlohmann::json::parse(yeto::read_file(copy / "lora_peft/adapter_config.json"));
  cfg["lora_alpha"] = 4;
  yeto::atomic_write(copy / "lora_peft/adapter_config.json", cfg.dump(2));
  const auto res = test::run_host({"check-parity", copy.string()});
  EXPECT_EQ(res.exit_code, static_cast<int>(ExitCode::parity_failed)) << res.all();
  EXPECT_NE(res.out.find("PASS  sample_base"), std::string::npos) << res.out;
  EXPECT_NE(res.out.find("FAIL  sample_lora (lora_peft)"), std::string::npos) << res.out;
  EXPECT_NE(res.out.find("FAIL  sample_lora (lora_diffusers at lora_alpha)"), std::string::npos) << res.out;
  EXPECT_NE(res.out.find("PASS  sample_lora_alpha_eq_rank (lora_diffusers)"), std::string::npos) << res.out;
}

TEST(CheckParityCommand, UnsupportedKindExitsNonZero) {
  test::TempDir tmp;
  write_case(tmp / "odd", {{"case", "odd"}, {"kind", "no_such_kind"}});
  const auto res = test::run_host({"check-parity", (tmp / "odd").string()});
  EXPECT_NE(res.exit_code, 0);
  EXPECT_NE(res.exit_code, static_cast<int>(ExitCode::parity_failed));
  EXPECT_NE(res.out.find("UNSUPPORTED"), std::string::npos) << res.all();
  EXPECT_NE(res.out.find("unsupported case kind no_such_kind"), std::string::npos) << res.all();
}

TEST(CheckParityCommand, MissingDirectoryAndJsonOutput) {
  auto res = test::run_host({"check-parity", "/nonexistent/case"});
  EXPECT_EQ(res.exit_code, static_cast<int>(ExitCode::not_found)) << res.all();
  res = test::run_host({"check-parity", "--json", fixture("scheduler-ddpm-pixart").string()});
  ASSERT_EQ(res.exit_code, 0) << res.all();
  const auto j = nlohmann::json::parse(res.out);
  EXPECT_EQ(j["passed"].get<int>(), 1);
  EXPECT_EQ(j["cases"][0]["comparisons"].size(), 5u);
}

// The plugin of a recorded pipeline or component class comes from the shipped plugins'
// manifests (pipelines, classes), not from a table in the host; and every class a shipped
// plugin registers is declared there, so that lookup misses none.
TEST(PluginParityKinds, TheClassesOfAShippedPluginComeFromItsManifest) {
  EXPECT_EQ(app::plugin_for_class("FluxTransformer2DModel"), "flux");
  EXPECT_EQ(app::plugin_for_class("FluxPipeline"), "flux");
  EXPECT_EQ(app::plugin_for_class("SD3Transformer2DModel"), "sd35");
  EXPECT_EQ(app::plugin_for_class("PixArtSigmaPipeline"), "pixart");
  EXPECT_EQ(app::plugin_for_class("AutoencoderKLWan"), "wan");  // nava registers the kit's Wan VAE too
  EXPECT_EQ(app::plugin_for_class("LTXVideoTransformer3DModel"), "ltx");
  EXPECT_EQ(app::plugin_for_class("YetoTinyDenoiser"), "tinyden");
  EXPECT_EQ(app::plugin_for_class("hy3dshape.models.denoisers.hunyuandit.HunYuanDiTPlain"), "hunyuan3d");
  EXPECT_EQ(app::plugin_for_class("protenix.model.modules.diffusion.DiffusionModule"), "protenix");
  EXPECT_EQ(app::plugin_for_class("UNet2DConditionModel"), "");

  const auto options = plugin::LoaderOptions::from_config(config::Config(), plugin::LoaderOptions::default_install_roots());
  const auto catalog = plugin::Catalog::scan(options.dirs);
  std::size_t checked = 0;
  for (const auto& file : catalog.plugins) {
    const auto& m = file.manifest;
    if (std::find(m.capabilities.begin(), m.capabilities.end(), "components") == m.capabilities.end()) continue;
    plugin::HostApiOptions h;
    h.plugin_name = m.name;
    auto accepting = options;  // a plugin that asks for its licence to be acknowledged
    accepting.accept_licenses.insert(m.name);
    const auto& loaded = plugin::load(m.name, accepting, plugin::make_host_api(h));
    plugin::Instance instance(loaded, "{}");
    plugin::ComponentRegistry registry;
    instance.register_components(registry);
    const auto names = registry.names();
    const std::set<std::string> registered(names.begin(), names.end());
    for (const auto& cls : registered) {
      if (std::count(m.classes.begin(), m.classes.end(), cls) || std::count(m.pipelines.begin(), m.pipelines.end(), cls))
        continue;
      // A kit component a plugin shares with the family that declares it (the Wan VAE in nava's
      // pipelines): the lookup still finds exactly one plugin, the declaring one.
      EXPECT_NE(app::plugin_for_class(cls), "") << m.name << " registers " << cls
                                                << " but no shipped manifest declares it (yeto_add_plugin CLASSES)";
    }
    for (const auto& cls : m.classes)
      EXPECT_TRUE(registered.count(cls)) << m.name << "'s manifest declares " << cls << ", which it does not register";
    ++checked;
  }
  EXPECT_GE(checked, 6u) << "the five families and tinyden";
}
