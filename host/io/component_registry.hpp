// The component registry: Diffusers `_class_name` -> constructor. The host registers its shared
// components (AutoencoderKL, CLIP/T5 text encoders, schedulers, tokenizers) and each family
// plugin registers its own (its denoiser, a video VAE, ...). No LibTorch here: a component that
// wraps a torch module derives from ModuleComponent (module_component.hpp).
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace yeto::io {

// Where one component comes from: its class, its folder in the repository and its parsed
// config.json / scheduler_config.json / tokenizer_config.json. `variant` is the weight-file
// variant requested for the run ("", "fp16", "bf16").
struct ComponentSource {
  std::string class_name;
  std::filesystem::path dir;
  nlohmann::json config;
  std::string variant;
};

class Component {
 public:
  virtual ~Component() = default;
  virtual std::string class_name() const = 0;
};

using ComponentFactory = std::function<std::shared_ptr<Component>(const ComponentSource&)>;

class ComponentRegistry {
 public:
  // The process-wide registry the host and plugins register into.
  static ComponentRegistry& global();

  // `kind` says what the class is ("scheduler", "tokenizer", "text_encoder", "vae",
  // "denoiser", ...). Registering a class twice replaces the earlier factory (a plugin may
  // override a host implementation); the replacement is logged.
  void add(const std::string& class_name, const std::string& kind, ComponentFactory factory);
  bool has(const std::string& class_name) const;
  // "" when the class is not registered.
  std::string kind(const std::string& class_name) const;
  // Throws yeto::Error (ExitCode::bad_input) "no implementation registered for class X" for an
  // unknown class, naming the component folder and the closest registered class.
  std::shared_ptr<Component> create(const ComponentSource& source) const;
  std::vector<std::string> classes() const;  // sorted

 private:
  struct Entry {
    std::string kind;
    ComponentFactory factory;
  };
  mutable std::mutex mu_;
  std::map<std::string, Entry> entries_;
};

}  // namespace yeto::io
