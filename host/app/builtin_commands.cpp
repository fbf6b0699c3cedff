// The commands of the program itself: version and config.
#include <iostream>

#include <nlohmann/json.hpp>

#include "app/commands.hpp"
#include "core/version.hpp"
#include "runtime/torch_runtime.hpp"

namespace yeto::app {
namespace {

int run_version(CommandContext& ctx) {
  const BuildInfo& b = build_info();
  const auto blas = runtime::blas_kernels();
  if (ctx.has("json")) {
    nlohmann::json j = {{"version", b.version},       {"git_commit", b.git_commit},
                        {"build_type", b.build_type}, {"compiler", b.compiler},
                        {"torch_version", b.torch_version}, {"cuda", b.cuda}};
    if (!blas.config.empty()) j["blas"] = {{"config", blas.config}, {"kernels", blas.active}, {"detected", blas.detected}};
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << "yeto-host " << b.version << " (" << b.git_commit << ", " << b.build_type << ")\n"
            << "compiler " << b.compiler << "\n"
            << "libtorch " << b.torch_version << (b.cuda ? " with CUDA" : " (CPU)") << "\n";
  if (!blas.config.empty())
    std::cout << "blas " << blas.config << ", " << blas.active << " kernels"
              << (blas.changed ? " (the library picked " + blas.detected + " for this CPU)" : std::string()) << "\n";
  return 0;
}

int run_config(CommandContext& ctx) {
  if (ctx.has("keys")) {
    if (ctx.has("markdown")) {
      std::cout << config::reference_markdown();
      return 0;
    }
    for (const auto& d : config::schema()) {
      std::cout << d.key << " = " << config::default_text(d) << "    # "
                << config::describe_type(d);
      if (!d.flag.empty()) std::cout << "; --" << d.flag;
      std::cout << "\n    " << d.doc << "\n";
    }
    return 0;
  }
  const config::Config& cfg = ctx.config();
  if (ctx.has("check")) {
    std::cout << "configuration is valid" << (cfg.file() ? " (" + cfg.file()->string() + ")" : std::string()) << "\n";
    return 0;
  }
  if (ctx.has("json")) {
    std::cout << cfg.to_json().dump(2) << "\n";
    return 0;
  }
  std::cout << "# resolved run configuration";
  if (cfg.file()) std::cout << " from " << cfg.file()->string();
  std::cout << "\n# config hash sha256:" << cfg.hash() << "\n\n" << cfg.to_toml(true);
  return 0;
}

}  // namespace

void register_builtin_commands(Registry& r) {
  Command version;
  version.name = "version";
  version.summary = "Print the host version, the commit it was built from and the LibTorch it uses.";
  version.options = {{"json", "", "Print as JSON."}};
  version.run = run_version;
  r.add(std::move(version));

  Command config;
  config.name = "config";
  config.summary = "Print the resolved run configuration with the origin of every value.";
  config.description =
      "Resolves defaults, then the --config file, then flags in command-line order, and prints "
      "every key as TOML with a comment naming where its value came from (default, file:line:column, or the flag). "
      "Any unknown, renamed or mistyped key is an error, exactly as for a run.";
  config.run_config = true;
  config.options = {{"print", "", "Print the resolved configuration (the default action)."},
                    {"json", "", "Print as JSON: {key: {value, origin, where}}."},
                    {"check", "", "Only validate; print nothing but the verdict."},
                    {"keys", "", "List every key of the schema with its type, default and flag."},
                    {"markdown", "", "With --keys: print the reference as Markdown (docs/CONFIG.md)."}};
  config.run = run_config;
  r.add(std::move(config));
}

}  // namespace yeto::app
