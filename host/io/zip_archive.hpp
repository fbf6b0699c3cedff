// A read-only view of an uncompressed ("stored") zip archive, the container format of
// Python torch.save files and .npz arrays. Memory-mapped; every offset in the central
// directory is bounds-checked, since the archive is untrusted input. Zip64 is supported.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace yeto::io {

struct ZipEntry {
  std::string name;
  std::uint64_t data_offset = 0;  // of the entry's bytes within the archive
  std::uint64_t size = 0;
  std::uint16_t method = 0;       // 0 = stored
};

class ZipArchive {
 public:
  // Throws yeto::Error: not_found when the file does not exist, bad_input when it is not a
  // well-formed zip archive.
  static ZipArchive open(const std::filesystem::path& path);
  // True when the file starts with a zip local-file signature.
  static bool looks_like_zip(const std::filesystem::path& path);

  const std::vector<ZipEntry>& entries() const;
  const ZipEntry* find(std::string_view name) const;
  // The bytes of a stored entry. Throws yeto::Error (bad_input) for a compressed one.
  std::string_view read(const ZipEntry& entry) const;
  const std::filesystem::path& path() const;

  struct State;  // implementation detail

 private:
  std::shared_ptr<const State> s_;
};

}  // namespace yeto::io
