#include <gtest/gtest.h>

#include "config/config.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/sha256.hpp"
#include "core/version.hpp"
#include "io/aliases.hpp"
#include "io/provenance.hpp"
#include "io/repository.hpp"
#include "io_fixtures.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;
using namespace yeto::io;
using yeto::test::io_fixtures;
using yeto::test::TempDir;

namespace {

// The parity cases copied into tests/fixtures/parity that hold a saved model or scheduler.
const std::vector<std::pair<std::string, std::string>> kParityModels = {
    {"flux-transformer", "FluxTransformer2DModel"},   {"sd35-transformer", "SD3Transformer2DModel"},
    {"pixart-transformer", "PixArtTransformer2DModel"}, {"wan-transformer", "WanTransformer3DModel"},
    {"ltx-transformer", "LTXVideoTransformer3DModel"}, {"vae-kl-16ch", "AutoencoderKL"},
    {"ltx-vae", "AutoencoderKLLTXVideo"},             {"clip-text", "CLIPTextModelWithProjection"},
    {"t5-encoder-relu", "T5EncoderModel"},            {"scheduler-flow-match-euler", "FlowMatchEulerDiscreteScheduler"},
    {"scheduler-unipc-wan", "UniPCMultistepScheduler"},
};

class Dummy : public Component {
 public:
  explicit Dummy(std::string n) : n_(std::move(n)) {}
  std::string class_name() const override { return n_; }

 private:
  std::string n_;
};

void copy_tree(const fs::path& from, const fs::path& to) {
  fs::copy(from, to, fs::copy_options::recursive);
  for (const auto& e : fs::recursive_directory_iterator(to))
    fs::permissions(e.path(), fs::perms::owner_write, fs::perm_options::add);
}

}  // namespace

TEST(DiffusersRepo, OpensTheFluxTinyPipeline) {
  const auto repo = DiffusersRepo::open(io_fixtures() / "repos/flux-tiny");
  EXPECT_EQ(repo.pipeline_class(), "FluxPipeline");
  EXPECT_FALSE(repo.single_model());
  ASSERT_EQ(repo.components().size(), 7u);
  const auto& t = repo.require("transformer");
  EXPECT_EQ(t.class_name, "FluxTransformer2DModel");
  EXPECT_EQ(t.library, "diffusers");
  EXPECT_TRUE(t.has_weights);
  EXPECT_EQ(t.config.at("num_layers"), 2);
  EXPECT_EQ(repo.require("scheduler").config_file.filename(), "scheduler_config.json");
  EXPECT_FALSE(repo.require("scheduler").has_weights);
  EXPECT_EQ(repo.require("tokenizer").tokenizer_files.size(), 4u);
  EXPECT_EQ(repo.require("text_encoder_2").class_name, "T5EncoderModel");
  const auto w = repo.weights("text_encoder_2");
  EXPECT_EQ(w.files().size(), 2u);
  EXPECT_NO_THROW(w.validate());
  try {
    repo.require("transfomer");
    FAIL();
  } catch (const yeto::Error& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'transformer'"), std::string::npos) << e.what();
  }
}

TEST(DiffusersRepo, ParityCasesOpenAsSingleModels) {
  for (const auto& [dir, cls] : kParityModels) {
    const auto repo = DiffusersRepo::open(io_fixtures() / "parity" / dir);
    EXPECT_TRUE(repo.single_model()) << dir;
    ASSERT_EQ(repo.components().size(), 1u) << dir;
    EXPECT_EQ(repo.components()[0].class_name, cls) << dir;
    if (cls.find("Scheduler") == std::string::npos) {
      const auto w = WeightSource::open(repo.components()[0].dir);
      EXPECT_GT(w.names().size(), 0u) << dir;
      EXPECT_NO_THROW(w.validate()) << dir;
    }
  }
}

// Every parity model loads through the registry by its Diffusers / transformers class name
// where that class is registered, and otherwise fails naming the class.
TEST(DiffusersRepo, ParityModelsGoThroughTheRegistry) {
  const ComponentRegistry& global = ComponentRegistry::global();
  for (const auto& [dir, cls] : kParityModels) {
    const auto repo = DiffusersRepo::open(io_fixtures() / "parity" / dir);
    if (global.has(cls)) {
      const auto c = repo.create("", global);
      ASSERT_NE(c, nullptr) << dir;
      EXPECT_EQ(c->class_name(), cls) << dir;
    } else {
      try {
        repo.create("", global);
        FAIL() << dir;
      } catch (const yeto::Error& e) {
        EXPECT_EQ(e.code(), yeto::ExitCode::bad_input);
        EXPECT_NE(std::string(e.what()).find("no implementation registered for class " + cls), std::string::npos)
            << e.what();
      }
    }
  }
  // A registered class receives its folder and parsed config.
  ComponentRegistry r;
  ComponentSource seen;
  r.add("FluxTransformer2DModel", "denoiser", [&](const ComponentSource& s) {
    seen = s;
    return std::make_shared<Dummy>(s.class_name);
  });
  const auto repo = DiffusersRepo::open(io_fixtures() / "repos/flux-tiny", "");
  EXPECT_EQ(repo.create("transformer", r)->class_name(), "FluxTransformer2DModel");
  EXPECT_EQ(seen.dir, io_fixtures() / "repos/flux-tiny/transformer");
  EXPECT_EQ(seen.config.at("in_channels"), 64);
  EXPECT_THROW(repo.create("vae", r), yeto::Error);
}

TEST(DiffusersRepo, BrokenRepositoriesNameTheFile) {
  TempDir t;
  EXPECT_THROW(DiffusersRepo::open(t / "absent"), yeto::Error);
  t.write("a/model_index.json", R"({"_class_name": "FluxPipeline", "vae": ["diffusers", "AutoencoderKL"]})");
  try {
    DiffusersRepo::open(t / "a");
    FAIL();
  } catch (const yeto::Error& e) {
    EXPECT_NE(std::string(e.what()).find((t / "a/vae").string()), std::string::npos) << e.what();
  }
  t.write("b/model_index.json", "{ not json");
  try {
    DiffusersRepo::open(t / "b");
    FAIL();
  } catch (const yeto::Error& e) {
    EXPECT_EQ(e.code(), yeto::ExitCode::bad_input);
    EXPECT_NE(std::string(e.what()).find("model_index.json"), std::string::npos) << e.what();
  }
  t.write("c/model_index.json", R"({"_class_name": "X", "image_encoder": [null, null], "flag": true})");
  EXPECT_EQ(DiffusersRepo::open(t / "c").components().size(), 0u);
}

TEST(DiffusersRepo, VariantsAreListed) {
  TempDir t;
  t.write("r/model_index.json", R"({"_class_name": "P", "vae": ["diffusers", "AutoencoderKL"]})");
  t.write("r/vae/config.json", R"({"_class_name": "AutoencoderKL"})");
  const std::string empty = [] {
    std::string s(8, '\0');
    s[0] = 8;
    return s + "{}      ";
  }();
  t.write("r/vae/diffusion_pytorch_model.safetensors", empty);
  t.write("r/vae/diffusion_pytorch_model.fp16.safetensors", empty);
  const auto repo = DiffusersRepo::open(t / "r", "fp16");
  EXPECT_EQ(repo.require("vae").variants, std::vector<std::string>{"fp16"});
  EXPECT_EQ(repo.weights("vae").files().front().filename(), "diffusion_pytorch_model.fp16.safetensors");
}

TEST(Provenance, RecordsCommitsHashesConfigAndHost) {
  TempDir t;
  ResolvedRepo repo;
  repo.id = "org/flux-tiny";
  repo.revision = "main";
  repo.commit = std::string(40, 'a');
  repo.path = io_fixtures() / "repos/flux-tiny";
  Provenance p;
  const yeto::config::Config cfg;
  p.set_config(cfg);
  const auto& src = p.add_source("model", "flux-dev", repo);
  EXPECT_EQ(src.files.size(), 6u);  // every safetensors file: 4 components with weights, 2 of them sharded
  const fs::path plugin = t.write("libflux.so", "plugin bytes");
  p.add_plugin("flux", "0.1.0", plugin);
  const fs::path out = t / "run/provenance.json";
  p.write(out);
  const Provenance back = Provenance::read(out);
  EXPECT_EQ(back.config_hash(), cfg.hash());
  ASSERT_EQ(back.sources().size(), 1u);
  EXPECT_EQ(back.sources()[0].commit, repo.commit);
  const auto& f = back.sources()[0].files[0];
  EXPECT_EQ(f.sha256, yeto::sha256_file(repo.path / f.path));
  EXPECT_EQ(back.plugins()[0].sha256, yeto::sha256_hex("plugin bytes"));
  const auto j = nlohmann::json::parse(yeto::read_file(out));
  EXPECT_EQ(j.at("host").at("version"), yeto::build_info().version);
  EXPECT_EQ(j.at("config_sha256"), cfg.hash());
  std::size_t files = 0;
  for (const auto& e : fs::directory_iterator(t / "run")) files += e.is_regular_file();
  EXPECT_EQ(files, 1u);  // no temporary left behind
}

TEST(ModelsDoc, AliasTableIsInSyncWithTheCode) {
  const std::string doc = yeto::read_file(fs::path(YETO_SOURCE_DIR) / "docs/MODELS.md");
  const std::string begin = "<!-- aliases:begin (generated by `yeto-host inspect --aliases --markdown`) -->\n";
  const std::string end = "<!-- aliases:end -->";
  const auto b = doc.find(begin), e = doc.find(end);
  ASSERT_NE(b, std::string::npos);
  ASSERT_NE(e, std::string::npos);
  EXPECT_EQ(doc.substr(b + begin.size(), e - b - begin.size()), aliases_markdown())
      << "regenerate the table in docs/MODELS.md with `yeto-host inspect --aliases --markdown`";
}

TEST(Inspect, PrintsComponentsAndValidates) {
  const auto r = yeto::test::run_host({"inspect", (io_fixtures() / "repos/flux-tiny").string()});
  EXPECT_EQ(r.exit_code, 0) << r.all();
  EXPECT_NE(r.out.find("FluxPipeline"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("transformer: FluxTransformer2DModel [diffusers]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sharded"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("validation ok"), std::string::npos) << r.out;
  const auto j = yeto::test::run_host({"inspect", (io_fixtures() / "repos/flux-tiny").string(), "--json"});
  ASSERT_EQ(j.exit_code, 0) << j.all();
  const auto parsed = nlohmann::json::parse(j.out);
  EXPECT_EQ(parsed.at("components").size(), 7u);
  EXPECT_EQ(parsed.at("validation"), "ok");
}

TEST(Inspect, ResolvesHubIdsAndFailsWithTheLoaderError) {
  TempDir t;
  const std::string commit = "0123456789abcdef0123456789abcdef01234567";
  const fs::path snap = t / ("hub/models--org--tiny/snapshots/" + commit);
  fs::create_directories(snap.parent_path());
  copy_tree(io_fixtures() / "repos/flux-tiny", snap);
  t.write("hub/models--org--tiny/refs/main", commit);
  const std::map<std::string, std::string> env = {{"HF_HUB_CACHE", (t / "hub").string()}};
  const auto ok = yeto::test::run_host({"inspect", "org/tiny", "--revision", "main"}, "", env);
  EXPECT_EQ(ok.exit_code, 0) << ok.all();
  EXPECT_NE(ok.out.find(commit), std::string::npos) << ok.out;
  const auto missing = yeto::test::run_host({"inspect", "org/other"}, "", env);
  EXPECT_EQ(missing.exit_code, 31) << missing.all();
  EXPECT_NE(missing.all().find("models--org--other"), std::string::npos) << missing.all();
  // Truncate one shard: inspect must fail with the safetensors error naming the file.
  const fs::path shard = snap / "transformer/diffusion_pytorch_model-00002-of-00002.safetensors";
  fs::resize_file(shard, fs::file_size(shard) - 10);
  const auto bad = yeto::test::run_host({"inspect", "org/tiny", "--json"}, "", env);
  EXPECT_EQ(bad.exit_code, 30) << bad.all();
  const auto pj = nlohmann::json::parse(bad.out);
  EXPECT_NE(pj.at("validation").get<std::string>().find("diffusion_pytorch_model-00002-of-00002.safetensors"),
            std::string::npos)
      << bad.out;
  const auto md = yeto::test::run_host({"inspect", "--aliases", "--markdown"});
  EXPECT_EQ(md.out, aliases_markdown());
}
