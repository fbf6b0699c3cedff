// The alphafold3 plugin through yeto-host: training is refused with the reason, sampling is
// refused while an environment variable is unset or the terms are not acknowledged, and a
// sample runs a stand-in run_alphafold.py (tests/alphafold3/stand_in.hpp) with the right
// arguments and environment, leaves its files, exit status and log in the sample's folder and
// writes its best-ranked model as the sample's mmCIF / PDB.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "stand_in.hpp"
#include "structure/structure.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const char* const kVars[] = {"YETO_ALPHAFOLD3_ROOT", "YETO_ALPHAFOLD3_MODEL_PARAMETERS_DIR", "YETO_ALPHAFOLD3_DATABASES_DIR"};
const std::string kAccept = "alphafold3.accept_model_parameter_terms=true";

// A working folder: an AlphaFold 3 install (the stand-in, "parameters", "databases"), the model
// folder `alphafold3/` (its model_index.json names AlphaFold3) and input JSONs.
struct Af3Folder {
  yeto::test::TempDir tmp;
  std::map<std::string, std::string> env;
  Af3Folder() {
    for (const char* v : kVars) ::unsetenv(v);  // only what each test gives
    tmp.write("install/af3/run_alphafold.py", yeto::test::kStandInRunAlphafold);
    tmp.write("install/params/af3.bin.zst", "not real parameters");
    tmp.write("install/dbs/README", "databases");
    tmp.write("alphafold3/model_index.json", R"({"_class_name": "AlphaFold3"})");
    tmp.write("fold.json", R"({"name": "Tiny", "modelSeeds": [1], "sequences": []})");
    tmp.write("fail.json", R"({"name": "Broken", "exit": 3})");
    tmp.write("garbled.json", R"({"name": "Garbled"})");
    env = {{kVars[0], (tmp / "install/af3").string()},
           {kVars[1], (tmp / "install/params").string()},
           {kVars[2], (tmp / "install/dbs").string()}};
  }
  yeto::test::ProcessResult sample(const std::vector<std::string>& extra, const std::string& prompt = "fold.json",
                                   const std::string& output = "out/fold.cif") const {
    std::vector<std::string> a = {"sample", "--model", "alphafold3", "--prompt", prompt, "--output", output};
    a.insert(a.end(), extra.begin(), extra.end());
    return yeto::test::run_host(a, tmp.path().string(), env);
  }
};

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST(AlphaFold3Host, TrainingIsRefusedWithTheReason) {
  Af3Folder s;
  const auto r = yeto::test::run_host({"train", "--model", "alphafold3", "--output", "runs/x", "--set", kAccept},
                                      s.tmp.path().string(), s.env);
  EXPECT_EQ(r.exit_code, 1) << r.all();
  EXPECT_TRUE(contains(r.all(), "chosen by alias 'alphafold3'")) << r.all();
  EXPECT_TRUE(contains(r.all(), "plugin 'alphafold3' prepare failed (unsupported)")) << r.all();
  EXPECT_TRUE(contains(r.all(), "AlphaFold 3 is not trained here, by design")) << r.all();
  EXPECT_TRUE(contains(r.all(), "non-commercial use only")) << r.all();
  EXPECT_TRUE(contains(r.all(), "no use of the model or its outputs to train other models")) << r.all();
  EXPECT_TRUE(contains(r.all(), "used only as received directly from Google")) << r.all();
  EXPECT_FALSE(fs::exists(s.tmp / "runs/x/checkpoints")) << "no step was taken";
}

TEST(AlphaFold3Host, EachUnsetVariableIsRefused) {
  for (const char* var : kVars) {
    Af3Folder s;
    s.env.erase(var);
    const auto r = s.sample({"--set", kAccept});
    EXPECT_EQ(r.exit_code, 30) << var << "\n" << r.all();
    EXPECT_TRUE(contains(r.all(), "alphafold3: $" + std::string(var) + " is not set")) << r.all();
    EXPECT_FALSE(fs::exists(s.tmp / "out")) << "nothing ran, nothing written";
  }
}

TEST(AlphaFold3Host, UnacknowledgedTermsAreRefused) {
  Af3Folder s;
  const auto r = s.sample({});
  EXPECT_EQ(r.exit_code, 30) << r.all();
  EXPECT_TRUE(contains(r.all(), "the AlphaFold 3 model-parameter terms are not acknowledged: set "
                                "alphafold3.accept_model_parameter_terms = true"))
      << r.all();
  EXPECT_FALSE(fs::exists(s.tmp / "out"));
  // A flag Yeto owns cannot be passed through.
  const auto owned = s.sample({"--set", kAccept, "--set", "alphafold3.args=[\"--model_dir=/elsewhere\"]"});
  EXPECT_EQ(owned.exit_code, 30) << owned.all();
  EXPECT_TRUE(contains(owned.all(), "Yeto sets --model_dir itself")) << owned.all();
  EXPECT_FALSE(fs::exists(s.tmp / "out"));
}

TEST(AlphaFold3Host, SamplingRunsRunAlphafoldAndCollectsItsOutputs) {
  Af3Folder s;
  s.env["YETO_HOST_TEST_SECRET"] = "s3cret";
  const auto r = s.sample({"--set", kAccept, "--set", "alphafold3.python=python3", "--set",
                           "alphafold3.args=[\"--run_data_pipeline=false\", \"--num_diffusion_samples=2\", \"--num_seeds=1\"]",
                           "--structure-format", "both"});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const fs::path dir = s.tmp / "out/fold";
  // What the stand-in saw.
  const json seen = json::parse(yeto::test::read_text(dir / "alphafold3/stand_in_record.json"));
  EXPECT_EQ(seen.at("argv"), json({(s.tmp / "install/af3/run_alphafold.py").string(),
                                   "--json_path=" + (s.tmp / "fold.json").string(),
                                   "--model_dir=" + (s.tmp / "install/params").string(),
                                   "--db_dir=" + (s.tmp / "install/dbs").string(),
                                   "--output_dir=" + (dir / "alphafold3").string(), "--run_data_pipeline=false",
                                   "--num_diffusion_samples=2", "--num_seeds=1"}))
      << seen.at("argv").dump();
  EXPECT_EQ(fs::path(seen.at("cwd").get<std::string>()), fs::canonical(s.tmp / "install/af3"));
  for (const char* var : kVars) EXPECT_EQ(seen.at("env").at(var), s.env.at(var)) << var;
  EXPECT_FALSE(seen.at("env").contains("YETO_HOST_TEST_SECRET")) << "Yeto's own variables stay out";
  // Its outputs, exit status and log, in the sample's folder.
  EXPECT_TRUE(fs::is_regular_file(dir / "alphafold3/tiny/tiny_model.cif"));
  EXPECT_TRUE(fs::is_regular_file(dir / "alphafold3/tiny/seed-1_sample-0/tiny_seed-1_sample-0_model.cif"));
  EXPECT_TRUE(fs::is_regular_file(dir / "alphafold3/tiny/tiny_ranking_scores.csv"));
  const json record = json::parse(yeto::test::read_text(dir / "run_alphafold.json"));
  EXPECT_EQ(record.at("exit_status"), 0);
  EXPECT_EQ(record.at("signal"), 0);
  EXPECT_EQ(record.at("top_model"), "alphafold3/tiny/tiny_model.cif");
  const std::string log = yeto::test::read_text(dir / "run_alphafold.log");
  EXPECT_TRUE(contains(log, "# python3 " + (s.tmp / "install/af3/run_alphafold.py").string())) << log;
  EXPECT_TRUE(contains(log, "stand-in: predicting")) << log;
  EXPECT_TRUE(contains(log, "stand-in: a warning on stderr")) << log;
  EXPECT_TRUE(contains(r.all(), "left 6 file(s) in out/fold")) << r.all();
  // The best-ranked model as the sample's structure files, read back.
  for (const char* f : {"out/fold.cif", "out/fold.pdb"}) {
    const auto st = yeto::structure::read_structure(s.tmp / f);
    ASSERT_EQ(st.atoms.size(), 3u) << f;
    ASSERT_EQ(st.models.size(), 1u) << f;
    EXPECT_EQ(st.atoms[2].name, "C4'") << f;
    EXPECT_EQ(st.atoms[2].chain, "B") << f;
    EXPECT_NEAR(st.models[0][2][0], -7.125f, 1e-4) << f;
    EXPECT_NEAR(st.models[0][0][2], 3.75f, 1e-4) << f;
  }
  // The same output again: the folder is not empty, runs are not mixed.
  const auto again = s.sample({"--set", kAccept});
  EXPECT_EQ(again.exit_code, 30) << again.all();
  EXPECT_TRUE(contains(again.all(), "exists and is not empty")) << again.all();
}

TEST(AlphaFold3Host, AFailedRunReportsItsStatusAndLog) {
  Af3Folder s;
  const auto r = s.sample({"--set", kAccept}, "fail.json", "out/broken.cif");
  EXPECT_EQ(r.exit_code, 1) << r.all();
  const fs::path dir = s.tmp / "out/broken";
  EXPECT_TRUE(contains(r.all(), "run_alphafold.py exit status 3; its log: " + (dir / "run_alphafold.log").string()))
      << r.all();
  EXPECT_TRUE(contains(r.all(), "stand-in: failing as asked")) << "the log's last lines\n" << r.all();
  const json record = json::parse(yeto::test::read_text(dir / "run_alphafold.json"));
  EXPECT_EQ(record.at("exit_status"), 3);
  EXPECT_EQ(record.at("outcome"), "exit status 3");
  EXPECT_TRUE(record.at("top_model").is_null());
  EXPECT_FALSE(fs::exists(s.tmp / "out/broken.cif"));
}

TEST(AlphaFold3Host, ADataPipelineOnlyRunLeavesFilesAndNoStructure) {
  Af3Folder s;
  const auto r = s.sample({"--set", kAccept, "--set", "alphafold3.args=[\"--run_inference=false\"]"});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_TRUE(fs::is_regular_file(s.tmp / "out/fold/alphafold3/tiny/tiny_data.json"));
  EXPECT_TRUE(contains(r.all(), "plugin 'alphafold3' gave no structure (no predicted model); nothing written to out/fold.cif"))
      << r.all();
  EXPECT_TRUE(contains(r.out, "out/fold\n")) << r.out;
  EXPECT_FALSE(fs::exists(s.tmp / "out/fold.cif"));
  EXPECT_TRUE(json::parse(yeto::test::read_text(s.tmp / "out/fold/run_alphafold.json")).at("top_model").is_null());
}

TEST(AlphaFold3Host, AModelTheParserRefusesIsNamed) {
  Af3Folder s;
  const auto r = s.sample({"--set", kAccept}, "garbled.json", "out/garbled.cif");
  EXPECT_EQ(r.exit_code, 30) << r.all();
  EXPECT_TRUE(contains(r.all(), "plugin 'alphafold3' structure_mmcif:5: the loop of _atom_site has 51 values, not a "
                                "multiple of its 18 columns"))
      << r.all();
  EXPECT_FALSE(fs::exists(s.tmp / "out/garbled.cif"));
  EXPECT_TRUE(fs::is_regular_file(s.tmp / "out/garbled/alphafold3/garbled/garbled_model.cif")) << "its files stay";
}
