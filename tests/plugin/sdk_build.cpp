#include "sdk_build.hpp"

#include <gtest/gtest.h>

#include <sstream>

#include "support/process.hpp"

namespace yeto::test {
namespace fs = std::filesystem;

namespace {

void run_ok(const std::vector<std::string>& argv) {
  const auto r = run_process(argv);
  ASSERT_EQ(r.exit_code, 0) << argv[0] << " " << (argv.size() > 1 ? argv[1] : "") << ":\n" << r.all();
}

}  // namespace

InstalledSdk install_sdk(const fs::path& root) {
  InstalledSdk sdk;
  sdk.root = root;
  fs::remove_all(sdk.root);
  fs::create_directories(sdk.root);
  sdk.prefix = sdk.root / "sdk";
  run_ok({YETO_CMAKE_COMMAND, "--install", YETO_BUILD_DIR, "--prefix", sdk.prefix.string(), "--component", "sdk"});
  EXPECT_TRUE(fs::exists(sdk.prefix / "include/yeto/plugin.h"));
  EXPECT_TRUE(fs::exists(sdk.prefix / "include/yeto/plugin.hpp"));
  EXPECT_TRUE(fs::exists(sdk.prefix / "lib/cmake/YetoSDK/YetoSDKConfig.cmake"));
  const fs::path sign_tool = sdk.prefix / "bin/yeto-sign";
  EXPECT_TRUE(fs::exists(sign_tool));
  // The installed tool makes the publisher key.
  run_ok({sign_tool.string(), "keygen", "--out", (sdk.root / "publisher").string(), "--comment", "third-party"});
  sdk.public_key = sdk.root / "publisher.public";
  sdk.secret_key = sdk.root / "publisher.secret";
  return sdk;
}

fs::path build_against(const InstalledSdk& sdk, const fs::path& src, const std::string& build_name,
                       const std::vector<std::string>& extra) {
  EXPECT_TRUE(fs::exists(src / "CMakeLists.txt"));
  const fs::path build = sdk.root / build_name;
  std::vector<std::string> configure = {YETO_CMAKE_COMMAND, "-S", src.string(), "-B", build.string(),
                                        "-G", "Ninja", "-DCMAKE_MAKE_PROGRAM=" + std::string(YETO_MAKE_PROGRAM),
                                        "-DCMAKE_CXX_COMPILER=" + std::string(YETO_CXX_COMPILER),
                                        "-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_PREFIX_PATH=" + sdk.prefix.string(),
                                        "-DYETO_SIGNING_KEY=" + sdk.secret_key.string()};
  if (std::string(YETO_CCACHE).size() && std::string(YETO_CCACHE).find("NOTFOUND") == std::string::npos)
    configure.push_back("-DCMAKE_CXX_COMPILER_LAUNCHER=" + std::string(YETO_CCACHE));
  configure.insert(configure.end(), extra.begin(), extra.end());
  run_ok(configure);
  run_ok({YETO_CMAKE_COMMAND, "--build", build.string()});
  return build / "plugins";
}

std::vector<std::string> exported_symbols(const fs::path& library) {
  const auto r = run_process({"nm", "-D", "--defined-only", "-C", library.string()});
  EXPECT_EQ(r.exit_code, 0) << r.all();
  std::vector<std::string> out;
  std::istringstream in(r.out);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(line);
  return out;
}

std::vector<std::string> own_exported_symbols(const fs::path& library) {
  std::vector<std::string> ours;
  for (const auto& sym : exported_symbols(library)) {
    const auto space = sym.find(' ', sym.find(' ') + 1);  // "<address> <type> <name>"
    const std::string name = space == std::string::npos ? sym : sym.substr(space + 1);
    for (const char* prefix : {"yeto::", "yeto_", "typeinfo for yeto", "typeinfo name for yeto", "vtable for yeto",
                               "VTT for yeto", "guard variable for yeto"})
      if (name.rfind(prefix, 0) == 0) {
        ours.push_back(sym);
        break;
      }
  }
  return ours;
}

}  // namespace yeto::test
