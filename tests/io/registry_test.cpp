#include <gtest/gtest.h>

#include "core/error.hpp"
#include "io/component_registry.hpp"

using namespace yeto::io;

namespace {

class Dummy : public Component {
 public:
  explicit Dummy(std::string n) : name_(std::move(n)) {}
  std::string class_name() const override { return name_; }

 private:
  std::string name_;
};

}  // namespace

TEST(ComponentRegistry, CreatesRegisteredClasses) {
  ComponentRegistry r;
  std::string seen_dir;
  r.add("FlowMatchEulerDiscreteScheduler", "scheduler", [&](const ComponentSource& s) {
    seen_dir = s.dir.string();
    return std::make_shared<Dummy>(s.class_name);
  });
  EXPECT_TRUE(r.has("FlowMatchEulerDiscreteScheduler"));
  EXPECT_FALSE(r.has("AutoencoderKL"));
  EXPECT_EQ(r.kind("FlowMatchEulerDiscreteScheduler"), "scheduler");
  EXPECT_EQ(r.kind("AutoencoderKL"), "");
  auto c = r.create({"FlowMatchEulerDiscreteScheduler", "/repo/scheduler", nlohmann::json::object(), ""});
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->class_name(), "FlowMatchEulerDiscreteScheduler");
  EXPECT_EQ(seen_dir, "/repo/scheduler");
  EXPECT_EQ(r.classes(), std::vector<std::string>{"FlowMatchEulerDiscreteScheduler"});
}

TEST(ComponentRegistry, UnknownClassIsBadInputNamingTheClass) {
  ComponentRegistry r;
  r.add("AutoencoderKL", "vae", [](const ComponentSource& s) { return std::make_shared<Dummy>(s.class_name); });
  try {
    r.create({"AutoencoderKLWan", "/repo/vae", {}, ""});
    FAIL();
  } catch (const yeto::Error& e) {
    EXPECT_EQ(e.code(), yeto::ExitCode::bad_input);
    const std::string m = e.what();
    EXPECT_NE(m.find("no implementation registered for class AutoencoderKLWan"), std::string::npos) << m;
    EXPECT_NE(m.find("/repo/vae"), std::string::npos) << m;
  }
}

TEST(ComponentRegistry, LaterRegistrationReplaces) {
  ComponentRegistry r;
  r.add("X", "a", [](const ComponentSource&) { return std::make_shared<Dummy>("first"); });
  r.add("X", "b", [](const ComponentSource&) { return std::make_shared<Dummy>("second"); });
  EXPECT_EQ(r.kind("X"), "b");
  EXPECT_EQ(r.create({"X", "", {}, ""})->class_name(), "second");
  EXPECT_THROW(r.add("", "a", [](const ComponentSource&) { return std::make_shared<Dummy>(""); }), yeto::Error);
}

TEST(ComponentRegistry, GlobalIsOneInstance) {
  EXPECT_EQ(&ComponentRegistry::global(), &ComponentRegistry::global());
}
