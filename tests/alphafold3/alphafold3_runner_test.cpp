// The AlphaFold 3 guard's runner without the host: the configuration keys (types, pass-through
// flags, the flags Yeto owns), each environment variable's refusal, the terms, the command line
// and the collection of a stand-in run_alphafold.py's outputs, exit status and log.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>

#include "alphafold3_runner.hpp"
#include "stand_in.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;
namespace af3 = yeto::alphafold3;
using nlohmann::json;

namespace {

std::string refusal_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const af3::Refusal& e) {
    return e.what();
  }
  ADD_FAILURE() << "no refusal";
  return "";
}

// Three folders laid out as AlphaFold 3 needs them, the root holding the stand-in.
struct Install {
  yeto::test::TempDir tmp;
  std::map<std::string, std::string> env;
  Install() {
    tmp.write("af3/run_alphafold.py", yeto::test::kStandInRunAlphafold);
    tmp.write("params/af3.bin.zst", "not real parameters");
    tmp.write("dbs/README", "databases");
    env = {{af3::kRootVar, (tmp / "af3").string()},
           {af3::kParametersVar, (tmp / "params").string()},
           {af3::kDatabasesVar, (tmp / "dbs").string()}};
  }
  af3::GetEnv getenv() const {
    return [this](const char* n) -> const char* {
      const auto it = env.find(n);
      return it == env.end() ? nullptr : it->second.c_str();
    };
  }
};

}  // namespace

TEST(AlphaFold3Runner, SettingsFromTheRunConfiguration) {
  const af3::Settings d = af3::settings_from_config(json::object());
  EXPECT_FALSE(d.accepted_terms);
  EXPECT_EQ(d.python, "python3");
  EXPECT_TRUE(d.args.empty());
  const af3::Settings s = af3::settings_from_config(
      {{af3::kTermsKey, true}, {af3::kPythonKey, "/opt/af3/bin/python"}, {af3::kArgsKey, {"--run_data_pipeline=false", "--num_seeds=2", "--nosave_embeddings"}}});
  EXPECT_TRUE(s.accepted_terms);
  EXPECT_EQ(s.python, "/opt/af3/bin/python");
  EXPECT_EQ(s.args, (std::vector<std::string>{"--run_data_pipeline=false", "--num_seeds=2", "--nosave_embeddings"}));
  EXPECT_NE(refusal_of([] { af3::settings_from_config({{af3::kTermsKey, "yes"}}); }).find("must be true or false"),
            std::string::npos);
  EXPECT_NE(refusal_of([] { af3::settings_from_config({{af3::kArgsKey, {"num_seeds=2"}}}); })
                .find("'num_seeds=2' is not a run_alphafold.py flag"),
            std::string::npos);
  for (const char* owned : {"--model_dir=/elsewhere", "--db_dir=/x", "--output_dir=o", "--json_path=j", "--input_dir=i"}) {
    const std::string m = refusal_of([&] { af3::settings_from_config({{af3::kArgsKey, {owned}}}); });
    EXPECT_NE(m.find("Yeto sets --"), std::string::npos) << owned << ": " << m;
  }
}

TEST(AlphaFold3Runner, EachEnvironmentVariableIsRequired) {
  Install in;
  const af3::Folders f = af3::folders_from_environment(in.getenv());
  EXPECT_EQ(f.root, in.tmp / "af3");
  EXPECT_EQ(f.parameters, in.tmp / "params");
  EXPECT_EQ(f.databases, in.tmp / "dbs");
  for (const char* var : {af3::kRootVar, af3::kParametersVar, af3::kDatabasesVar}) {
    Install missing;
    missing.env.erase(var);
    EXPECT_NE(refusal_of([&] { af3::folders_from_environment(missing.getenv()); }).find("$" + std::string(var) + " is not set"),
              std::string::npos)
        << var;
    Install wrong;
    wrong.env[var] = (wrong.tmp / "nowhere").string();
    EXPECT_NE(refusal_of([&] { af3::folders_from_environment(wrong.getenv()); }).find("is not a directory"), std::string::npos)
        << var;
  }
  Install no_script;
  fs::remove(no_script.tmp / "af3/run_alphafold.py");
  EXPECT_NE(refusal_of([&] { af3::folders_from_environment(no_script.getenv()); }).find("holds no run_alphafold.py"),
            std::string::npos);
}

TEST(AlphaFold3Runner, TermsInputAndOutputAreCheckedBeforeARun) {
  Install in;
  const auto folders = af3::folders_from_environment(in.getenv());
  const auto input = in.tmp.write("fold.json", R"({"name": "Tiny Fold"})");
  af3::Settings s;
  EXPECT_NE(refusal_of([&] { af3::plan_run(s, folders, input, in.tmp / "out"); })
                .find("terms are not acknowledged: set alphafold3.accept_model_parameter_terms = true"),
            std::string::npos);
  s.accepted_terms = true;
  EXPECT_NE(refusal_of([&] { af3::plan_run(s, folders, in.tmp / "missing.json", in.tmp / "out"); })
                .find("must be the path of an AlphaFold 3 input JSON"),
            std::string::npos);
  in.tmp.write("used/x", "an earlier run");
  EXPECT_NE(refusal_of([&] { af3::plan_run(s, folders, input, in.tmp / "used"); }).find("exists and is not empty"),
            std::string::npos);
  s.args = {"--num_diffusion_samples=2"};
  const af3::Run r = af3::plan_run(s, folders, input, in.tmp / "out");
  EXPECT_EQ(r.argv, (std::vector<std::string>{"python3", (in.tmp / "af3/run_alphafold.py").string(),
                                              "--json_path=" + input.string(),
                                              "--model_dir=" + (in.tmp / "params").string(),
                                              "--db_dir=" + (in.tmp / "dbs").string(),
                                              "--output_dir=" + (in.tmp / "out/alphafold3").string(),
                                              "--num_diffusion_samples=2"}));
  EXPECT_EQ(r.cwd, in.tmp / "af3");
}

TEST(AlphaFold3Runner, ExecuteCollectsOutputsExitStatusAndLog) {
  Install in;
  for (const auto& [k, v] : in.env) ::setenv(k.c_str(), v.c_str(), 1);
  ::setenv("YETO_RUNNER_TEST_SECRET", "s3cret", 1);
  af3::Settings s;
  s.accepted_terms = true;
  const auto folders = af3::folders_from_environment(in.getenv());
  const af3::Run ok = af3::plan_run(s, folders, in.tmp.write("fold.json", R"({"name": "Tiny"})"), in.tmp / "ok");
  const af3::Outcome o = af3::execute(ok);
  EXPECT_TRUE(o.process.ok()) << yeto::family::describe(o.process);
  EXPECT_EQ(o.top_model, in.tmp / "ok/alphafold3/tiny/tiny_model.cif");
  EXPECT_EQ(o.files, 6u) << "the stand-in's record and three outputs, the log and the record";
  const json record = json::parse(yeto::test::read_text(in.tmp / "ok/run_alphafold.json"));
  EXPECT_EQ(record.at("exit_status"), 0);
  EXPECT_EQ(record.at("outcome"), "exit status 0");
  EXPECT_EQ(record.at("top_model"), "alphafold3/tiny/tiny_model.cif");
  EXPECT_EQ(record.at("argv"), json(ok.argv));
  const std::string log = yeto::test::read_text(in.tmp / "ok/run_alphafold.log");
  EXPECT_EQ(log.rfind("# yeto alphafold3: in " + (in.tmp / "af3").string() + "\n# python3 ", 0), 0u) << log;
  EXPECT_NE(log.find("stand-in: predicting"), std::string::npos) << log;
  EXPECT_NE(log.find("stand-in: a warning on stderr"), std::string::npos) << log;
  const json seen = json::parse(yeto::test::read_text(in.tmp / "ok/alphafold3/stand_in_record.json"));
  EXPECT_EQ(seen.at("env").at(af3::kParametersVar), (in.tmp / "params").string());
  EXPECT_EQ(seen.at("env").at("PYTHONUNBUFFERED"), "1");
  EXPECT_FALSE(seen.at("env").contains("YETO_RUNNER_TEST_SECRET")) << "Yeto's own variables stay out";
  EXPECT_EQ(fs::path(seen.at("cwd").get<std::string>()), fs::canonical(in.tmp / "af3"));

  const af3::Run bad = af3::plan_run(s, folders, in.tmp.write("fail.json", R"({"name": "x", "exit": 3})"), in.tmp / "bad");
  const af3::Outcome f = af3::execute(bad);
  EXPECT_FALSE(f.process.ok());
  EXPECT_EQ(f.process.exit_status, 3);
  EXPECT_TRUE(f.top_model.empty());
  EXPECT_EQ(json::parse(yeto::test::read_text(in.tmp / "bad/run_alphafold.json")).at("exit_status"), 3);
  EXPECT_NE(yeto::family::tail_lines(bad.log, 1).find("failing as asked"), std::string::npos);
  for (const auto& [k, v] : in.env) ::unsetenv(k.c_str());
  ::unsetenv("YETO_RUNNER_TEST_SECRET");
}

TEST(AlphaFold3Runner, TrainingRefusalGivesTheReason) {
  const std::string m = af3::training_refusal("loss_step");
  for (const char* part : {"loss_step", "non-commercial", "train other models", "as received directly from Google", "Protenix"})
    EXPECT_NE(m.find(part), std::string::npos) << part << ": " << m;
}
