#include "core/metrics.hpp"

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace yeto {

JsonlWriter::JsonlWriter(const std::filesystem::path& path) : path_(path) {
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  file_ = std::fopen(path.c_str(), "ab");
  if (!file_)
    throw Error("cannot open metrics file '" + path.string() + "': " + std::strerror(errno));
}

JsonlWriter::~JsonlWriter() {
  if (file_) std::fclose(file_);
}

void JsonlWriter::write(const nlohmann::json& record) {
  // NaN and Inf are not JSON; nlohmann writes them as null, which plotting tools accept.
  const std::string line = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::lock_guard<std::mutex> lock(mutex_);
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0)
    throw Error("cannot append to metrics file '" + path_.string() + "': " + std::strerror(errno));
}

}  // namespace yeto
