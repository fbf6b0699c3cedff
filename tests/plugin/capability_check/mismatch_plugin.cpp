// Must not compile: compiled by the ctest plugin_capabilities_checked_at_compile_time, which
// expects both of CapabilityCheck's messages (yeto/plugin.hpp). The info header declares
// trainable and loss_step; the class overrides trainable_parameters and generate but not
// loss_step.
#include <yeto/plugin.hpp>

class MismatchPlugin : public yeto::sdk::Plugin {
 public:
  yeto::sdk::NamedTensors trainable_parameters() override { return {}; }
  yeto::sdk::NamedTensors generate(const std::string&, const yeto::sdk::NamedTensors&) override { return {}; }
};

YETO_PLUGIN(MismatchPlugin)
