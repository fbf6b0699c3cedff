// Out-of-tree plugin builds as a third party does them: the SDK installed into a prefix of its
// own, a publisher key made with the installed yeto-sign, a plugin project configured and built
// against that prefix alone (nothing of the Yeto source or build tree on any path). Torch-free;
// the suites that use it (plugin_torch_test, plugin_template_test) pass YETO_CMAKE_COMMAND,
// YETO_MAKE_PROGRAM, YETO_CXX_COMPILER and YETO_CCACHE.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace yeto::test {

struct InstalledSdk {
  std::filesystem::path root;  // a fixed path per suite: ccache hits on reruns
  std::filesystem::path prefix;
  std::filesystem::path public_key;
  std::filesystem::path secret_key;
};

// Installs the build's `sdk` component into <root>/sdk (root emptied first) and makes a publisher
// key pair <root>/publisher.{public,secret} with the installed yeto-sign. Failures are gtest
// failures (check HasFatalFailure / the returned paths).
InstalledSdk install_sdk(const std::filesystem::path& root);

// Configures (Ninja, Release, the test build's compiler and ccache) and builds the plugin project
// in `src` against the installed SDK, signed with its publisher key, in <root>/<build_name>;
// `extra` are more -D arguments. Returns the directory holding the signed plugin.
std::filesystem::path build_against(const InstalledSdk& sdk, const std::filesystem::path& src,
                                    const std::string& build_name, const std::vector<std::string>& extra = {});

// The dynamic symbols a library defines, demangled ("<address> <type> <name>"), one per entry.
std::vector<std::string> exported_symbols(const std::filesystem::path& library);

// Of those, the ones that are Yeto's own code: functions and objects of namespace yeto, the type
// information, vtables and guards of its classes, yeto_* C symbols. LibTorch's and the standard
// library's templates instantiated for our types (Module::register_module<yeto::nn::LinearImpl>)
// are weak copies of their code, not ours. A plugin on the kit should export only
// "yeto_plugin_entry".
std::vector<std::string> own_exported_symbols(const std::filesystem::path& library);

}  // namespace yeto::test
