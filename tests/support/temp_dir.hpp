// A temporary directory removed when the test ends, plus a helper to write files into it.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace yeto::test {

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& rel) const { return path_ / rel; }
  // Writes `content` to path()/rel (creating directories) and returns the full path.
  std::filesystem::path write(const std::string& rel, std::string_view content) const;

 private:
  std::filesystem::path path_;
};

std::string read_text(const std::filesystem::path& p);

}  // namespace yeto::test
