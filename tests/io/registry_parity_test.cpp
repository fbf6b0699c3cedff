// The parity models load through the component registry by their Diffusers / transformers
// class names, with the host's shared components registered (AutoencoderKL, CLIP and T5
// encoders, schedulers, tokenizers); classes nobody has registered yet fail naming the class.
#include <gtest/gtest.h>

#include <iostream>

#include <torch/torch.h>

#include "core/error.hpp"
#include "core/strings.hpp"
#include "io/module_component.hpp"
#include "io/repository.hpp"
#include "io_fixtures.hpp"
#include "models/model_components.hpp"
#include "schedulers/scheduler.hpp"
#include "text/tokenizer_components.hpp"

namespace fs = std::filesystem;
using namespace yeto::io;

namespace {

void register_host_components(ComponentRegistry& r) {
  yeto::models::register_model_components(r);
  yeto::schedulers::register_scheduler_components(r);
  yeto::text::register_tokenizer_components(r);
}

struct Tally {
  std::vector<std::string> created, unregistered;
};

void create_or_name_the_class(const ComponentRegistry& reg, const DiffusersRepo& repo, const ComponentInfo& c,
                              Tally& tally) {
  const std::string where = (repo.dir() / c.name).string() + " (" + c.class_name + ")";
  if (reg.has(c.class_name)) {
    std::shared_ptr<Component> made;
    ASSERT_NO_THROW(made = repo.create(c.name, reg)) << where;
    ASSERT_NE(made, nullptr) << where;
    if (auto* m = dynamic_cast<ModuleComponent*>(made.get())) {
      EXPECT_FALSE(m->module().named_parameters().is_empty()) << where;
    }
    tally.created.push_back(c.class_name);
  } else {
    try {
      repo.create(c.name, reg);
      ADD_FAILURE() << where << " was created without a registered class";
    } catch (const yeto::Error& e) {
      EXPECT_EQ(e.code(), yeto::ExitCode::bad_input);
      EXPECT_NE(std::string(e.what()).find("no implementation registered for class " + c.class_name),
                std::string::npos)
          << e.what();
    }
    tally.unregistered.push_back(c.class_name);
  }
}

}  // namespace

TEST(RegistryParity, ParityCaseModelsLoadByClassName) {
  ComponentRegistry reg;
  register_host_components(reg);
  Tally tally;
  for (const char* dir : {"flux-transformer", "sd35-transformer", "pixart-transformer", "wan-transformer",
                          "ltx-transformer", "vae-kl-16ch", "ltx-vae", "clip-text", "t5-encoder-relu",
                          "scheduler-flow-match-euler", "scheduler-unipc-wan"}) {
    const DiffusersRepo repo = DiffusersRepo::open(yeto::test::io_fixtures() / "parity" / dir);
    create_or_name_the_class(reg, repo, repo.components().front(), tally);
  }
  std::cout << "[registry] created: " << yeto::join(tally.created, ", ")
            << "\n[registry] not registered yet: " << yeto::join(tally.unregistered, ", ") << "\n";
  // The host's own classes are all registered, with weights loaded strictly.
  for (const char* cls : {"AutoencoderKL", "CLIPTextModelWithProjection", "T5EncoderModel",
                          "FlowMatchEulerDiscreteScheduler", "UniPCMultistepScheduler"})
    EXPECT_NE(std::find(tally.created.begin(), tally.created.end(), cls), tally.created.end()) << cls;
}

TEST(RegistryParity, FluxTinyComponentsLoadByClassName) {
  ComponentRegistry reg;
  register_host_components(reg);
  const DiffusersRepo repo = DiffusersRepo::open(yeto::test::io_fixtures() / "repos/flux-tiny");
  Tally tally;
  for (const auto& c : repo.components()) create_or_name_the_class(reg, repo, c, tally);
  EXPECT_GE(tally.created.size(), 6u) << yeto::join(tally.unregistered, ", ");  // all but the family's denoiser
}
