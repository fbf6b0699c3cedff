// The layering of host/: host/CMakeLists.txt lists the areas from the ground up, and every area
// may include and link only areas listed before it (host/app, the commands, stands last). The
// SDK and the plugins include no host header at all. These tests read the sources and the
// CMake files, so a lower area that reaches up, or two libraries that need each other, fails
// here with the file and line that does it.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

const fs::path kSource = YETO_SOURCE_DIR;

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Drops `# ...` comments so commented-out commands and prose are not read as CMake.
std::string cmake_code(const fs::path& p) {
  std::istringstream in(read(p));
  std::string line, out;
  while (std::getline(in, line)) out += line.substr(0, line.find('#')) + "\n";
  return out;
}

// The areas in the order host/CMakeLists.txt adds them.
std::vector<std::string> area_order() {
  std::vector<std::string> areas;
  const std::string text = cmake_code(kSource / "host/CMakeLists.txt");
  const std::regex re(R"(add_subdirectory\(\s*([a-z_]+)\s*\))");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it)
    areas.push_back((*it)[1]);
  return areas;
}

std::map<std::string, std::size_t> area_ranks() {
  std::map<std::string, std::size_t> rank;
  const auto areas = area_order();
  for (std::size_t i = 0; i < areas.size(); ++i) rank[areas[i]] = i;
  return rank;
}

bool source_file(const fs::path& p) {
  const auto ext = p.extension();
  return ext == ".cpp" || ext == ".hpp" || ext == ".h" || ext == ".in";
}

struct Include {
  fs::path file;
  int line = 0;
  std::string area;  // the first folder of the quoted include
  std::string text;
};

std::vector<Include> quoted_includes(const fs::path& root) {
  std::vector<Include> out;
  if (!fs::exists(root)) return out;
  const std::regex re(R"(^\s*#\s*include\s*"([a-z_]+)/([^"]+)\")");
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (!e.is_regular_file() || !source_file(e.path())) continue;
    std::istringstream in(read(e.path()));
    std::string line;
    int n = 0;
    while (std::getline(in, line)) {
      ++n;
      std::smatch m;
      if (std::regex_search(line, m, re)) out.push_back({e.path(), n, m[1], line});
    }
  }
  return out;
}

std::string where(const Include& inc) {
  return fs::relative(inc.file, kSource).string() + ":" + std::to_string(inc.line) + ": " + inc.text;
}

}  // namespace

TEST(Layering, EveryAreaOfHostIsPlacedInTheOrder) {
  const auto rank = area_ranks();
  ASSERT_GE(rank.size(), 15u) << "host/CMakeLists.txt lists too few areas";
  ASSERT_TRUE(rank.count("core") && rank.count("app"));
  EXPECT_EQ(rank.at("core"), 0u) << "core is the ground";
  EXPECT_EQ(rank.at("app"), rank.size() - 1) << "host/app stands above every other area";
  for (const auto& e : fs::directory_iterator(kSource / "host")) {
    if (e.is_directory() && fs::exists(e.path() / "CMakeLists.txt")) {
      EXPECT_TRUE(rank.count(e.path().filename().string()))
          << "host/" << e.path().filename().string() << " is not added in host/CMakeLists.txt";
    }
  }
}

TEST(Layering, NoAreaIncludesAnAreaListedAfterIt) {
  const auto rank = area_ranks();
  std::size_t checked = 0;
  for (const auto& [area, r] : rank) {
    for (const auto& inc : quoted_includes(kSource / "host" / area)) {
      const auto it = rank.find(inc.area);
      if (it == rank.end()) continue;  // a header of the SDK ("yeto/...") or a generated one
      ++checked;
      EXPECT_LE(it->second, r) << where(inc) << "\n  host/" << area << " may not include host/" << inc.area
                               << ", which host/CMakeLists.txt lists after it";
    }
  }
  EXPECT_GT(checked, 300u) << "the include scan found too few includes to be reading the sources";
}

TEST(Layering, OnlyHostAppRegistersCommands) {
  const std::regex re(R"(void\s+register_[a-z_]+_commands?\s*\(\s*Registry\s*&)");
  std::size_t in_app = 0;
  for (const auto& e : fs::recursive_directory_iterator(kSource / "host")) {
    if (!e.is_regular_file() || !source_file(e.path())) continue;
    const std::string text = read(e.path());
    const bool app = fs::relative(e.path(), kSource / "host").begin()->string() == "app";
    const bool registers = std::regex_search(text, re);
    if (app) {
      in_app += registers ? 1 : 0;
    } else {
      EXPECT_FALSE(registers) << fs::relative(e.path(), kSource).string() << " registers a command outside host/app";
    }
  }
  EXPECT_GE(in_app, 12u);
}

TEST(Layering, TheSdkAndThePluginsIncludeNoHostHeader) {
  const auto rank = area_ranks();
  for (const char* root : {"sdk", "plugins"}) {
    for (const auto& inc : quoted_includes(kSource / root)) {
      EXPECT_FALSE(rank.count(inc.area)) << where(inc) << "\n  " << root << "/ builds against the SDK only";
    }
  }
}

// The yeto_* libraries each CMakeLists.txt of host/ defines, and what they link.
TEST(Layering, LibrariesLinkOnlyDownwardsAndNeverInACircle) {
  const auto rank = area_ranks();
  std::map<std::string, std::string> area_of;                  // target -> area
  std::map<std::string, std::set<std::string>> links;         // target -> linked yeto targets
  const std::regex def(R"((add_library|add_executable)\(\s*([A-Za-z0-9_-]+))");
  const std::regex link(R"(target_link_libraries\(\s*([A-Za-z0-9_-]+)([^)]*)\))");
  const std::regex name(R"(\b(yeto[_-][A-Za-z0-9_-]+)\b)");
  for (const auto& [area, r] : rank) {
    const std::string text = cmake_code(kSource / "host" / area / "CMakeLists.txt");
    for (auto it = std::sregex_iterator(text.begin(), text.end(), def); it != std::sregex_iterator(); ++it)
      area_of[(*it)[2]] = area;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), link); it != std::sregex_iterator(); ++it) {
      const std::string args = (*it)[2];
      for (auto n = std::sregex_iterator(args.begin(), args.end(), name); n != std::sregex_iterator(); ++n)
        links[(*it)[1]].insert((*n)[1]);
    }
  }
  ASSERT_GT(area_of.size(), 25u);
  for (const auto& [target, deps] : links) {
    ASSERT_TRUE(area_of.count(target)) << target << " is linked in a CMakeLists.txt that does not define it";
    for (const auto& dep : deps) {
      const auto it = area_of.find(dep);
      if (it == area_of.end()) continue;  // the SDK's libraries, LibTorch, yeto_torch
      EXPECT_LE(rank.at(it->second), rank.at(area_of.at(target)))
          << target << " (host/" << area_of.at(target) << ") links " << dep << " (host/" << it->second
          << "), which host/CMakeLists.txt lists after it";
    }
  }
  // No circle, also within one area: depth-first search over the link graph.
  std::map<std::string, int> state;  // 1 on the path, 2 done
  std::vector<std::string> path;
  std::function<void(const std::string&)> visit = [&](const std::string& t) {
    state[t] = 1;
    path.push_back(t);
    for (const auto& d : links[t]) {
      if (!area_of.count(d)) continue;
      if (state[d] == 1) {
        std::string circle;
        for (auto p = std::find(path.begin(), path.end(), d); p != path.end(); ++p) circle += *p + " -> ";
        ADD_FAILURE() << "libraries link each other in a circle: " << circle << d;
      } else if (state[d] == 0) {
        visit(d);
      }
    }
    path.pop_back();
    state[t] = 2;
  };
  for (const auto& [target, area] : area_of)
    if (state[target] == 0) visit(target);
}

// The learner, the pipeline, the data pipeline and the syncer never branch on a model family:
// their code (comments aside) names none of the in-tree families (the folders of plugins/, e.g.
// nava, hunyuan3d, flux). A family reaches them only through the plugin ABI's generic hooks
// (loss_step for a family that computes its whole loss).
TEST(Layering, LearnerPipelineDataAndSyncNameNoModelFamily) {
  std::vector<std::string> families;
  for (const auto& e : fs::directory_iterator(kSource / "plugins"))
    if (e.is_directory() && fs::exists(e.path() / "CMakeLists.txt")) families.push_back(e.path().filename().string());
  std::sort(families.begin(), families.end());
  ASSERT_GE(families.size(), 7u) << "plugins/ holds too few families to be the source tree";
  ASSERT_TRUE(std::count(families.begin(), families.end(), "nava"));
  std::string alternatives;
  for (const auto& f : families) alternatives += (alternatives.empty() ? "" : "|") + f;
  // Whole words: LTX-2's audio codec (LTX2AudioVaeComponent, a shared host component of its own)
  // is not the ltx (LTX-Video) family.
  const std::regex word("(^|[^A-Za-z0-9])(" + alternatives + ")([^A-Za-z0-9]|$)", std::regex::icase);
  const std::regex line_comment(R"(//.*)");
  std::size_t files = 0;
  for (const char* area : {"learner", "pipeline", "data", "sync"}) {
    for (const auto& e : fs::recursive_directory_iterator(kSource / "host" / area)) {
      if (!e.is_regular_file() || !source_file(e.path())) continue;
      ++files;
      std::string text = read(e.path());
      // Block comments out (line structure kept), then each line's // comment.
      for (std::size_t b; (b = text.find("/*")) != std::string::npos;) {
        const auto end = text.find("*/", b + 2);
        const auto stop = end == std::string::npos ? text.size() : end + 2;
        for (std::size_t i = b; i < stop; ++i)
          if (text[i] != '\n') text[i] = ' ';
      }
      std::istringstream in(text);
      std::string line;
      int n = 0;
      while (std::getline(in, line)) {
        ++n;
        const auto code = std::regex_replace(line, line_comment, "");
        std::smatch m;
        EXPECT_FALSE(std::regex_search(code, m, word))
            << fs::relative(e.path(), kSource).string() << ":" << n << ": names the family '" << m[2] << "': " << line;
      }
    }
  }
  EXPECT_GT(files, 40u) << "the scan found too few sources to be reading host/";
}
