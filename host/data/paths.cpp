#include "data/paths.hpp"

#include <algorithm>
#include <cctype>
#include <system_error>

namespace yeto::data {
namespace fs = std::filesystem;

bool is_within(const fs::path& root, const fs::path& path) {
  std::error_code ec;
  const fs::path r = fs::weakly_canonical(root, ec);
  if (ec) return false;
  const fs::path p = fs::weakly_canonical(path, ec);
  if (ec) return false;
  auto ri = r.begin();
  auto pi = p.begin();
  for (; ri != r.end(); ++ri, ++pi) {
    if (ri->empty()) continue;  // trailing separator
    if (pi == p.end() || *ri != *pi) return false;
  }
  return true;
}

ResolvedPath resolve_manifest_path(const PathPolicy& policy, const std::string& text) {
  ResolvedPath out;
  if (text.empty()) {
    out.error = "empty path";
    return out;
  }
  if (text.find('\0') != std::string::npos) {
    out.error = "path contains a NUL byte";
    return out;
  }
  fs::path p(text);
  if (p.is_relative()) p = policy.root / p;
  p = p.lexically_normal();
  if (!policy.allow_escape && !is_within(policy.root, p)) {
    out.error = "path '" + text + "' resolves to " + p.string() + ", outside the manifest's directory " +
                policy.root.string() +
                "; move the file under that directory or set data.allow_path_escape = true";
    return out;
  }
  out.path = p;
  return out;
}

bool natural_less(const std::string& a, const std::string& b) {
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const auto ca = static_cast<unsigned char>(a[i]);
    const auto cb = static_cast<unsigned char>(b[j]);
    if (std::isdigit(ca) && std::isdigit(cb)) {
      std::size_t ei = i, ej = j;
      while (ei < a.size() && std::isdigit(static_cast<unsigned char>(a[ei]))) ++ei;
      while (ej < b.size() && std::isdigit(static_cast<unsigned char>(b[ej]))) ++ej;
      // Compare numerically without overflow: strip leading zeros, then length, then digits.
      std::size_t si = i, sj = j;
      while (si + 1 < ei && a[si] == '0') ++si;
      while (sj + 1 < ej && b[sj] == '0') ++sj;
      if (ei - si != ej - sj) return ei - si < ej - sj;
      const int c = a.compare(si, ei - si, b, sj, ej - sj);
      if (c != 0) return c < 0;
      if (ei - i != ej - j) return ei - i < ej - j;  // fewer leading zeros first
      i = ei;
      j = ej;
      continue;
    }
    if (ca != cb) return ca < cb;
    ++i;
    ++j;
  }
  return a.size() - i < b.size() - j;
}

std::vector<fs::path> list_files_naturally(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_regular_file(ec) && it->path().filename().string().front() != '.') files.push_back(it->path());
  }
  std::sort(files.begin(), files.end(),
            [](const fs::path& x, const fs::path& y) { return natural_less(x.filename().string(), y.filename().string()); });
  return files;
}

std::string lower_extension(const fs::path& p) {
  std::string e = p.extension().string();
  std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return e;
}

bool is_image_extension(const std::string& e) {
  return e == ".png" || e == ".jpg" || e == ".jpeg" || e == ".bmp" || e == ".tga" || e == ".gif" ||
         e == ".pnm" || e == ".ppm" || e == ".pgm" || e == ".psd" || e == ".hdr" || e == ".pic";
}

bool is_video_extension(const std::string& e) {
  return e == ".mp4" || e == ".mov" || e == ".mkv" || e == ".webm" || e == ".avi" || e == ".m4v" ||
         e == ".mpg" || e == ".mpeg" || e == ".ts" || e == ".flv" || e == ".wmv" || e == ".ogv" || e == ".y4m" ||
         e == ".nut" || e == ".gifv";
}

bool is_tensor_extension(const std::string& e) {
  return e == ".pt" || e == ".pth" || e == ".npy" || e == ".safetensors";
}

}  // namespace yeto::data
