#include "core/metrics.hpp"

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/tensorboard.hpp"
#include <cmath>

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

RunMetrics::RunMetrics(const std::filesystem::path& run_dir, bool tensorboard)
    : jsonl_(run_dir / "metrics.jsonl") {
  if (tensorboard) tb_ = std::make_unique<TensorBoardWriter>(run_dir / "tensorboard");
}

RunMetrics::~RunMetrics() = default;

void RunMetrics::restart_at(std::int64_t step) {
  if (tb_) tb_->session_start(step, "resumed from step " + std::to_string(step - 1));
}

std::filesystem::path RunMetrics::tensorboard_path() const { return tb_ ? tb_->path() : std::filesystem::path{}; }

void RunMetrics::image(const std::string& tag, std::int64_t step, const std::string& png, int height, int width) {
  if (tb_) tb_->image(tag, png, height, width, 3, step);
}

void RunMetrics::record(const nlohmann::json& rec) {
  if (!rec.is_object() || !rec.contains("step") || !rec["step"].is_number_integer())
    throw Error("internal: a metrics record needs an integer \"step\"");
  jsonl_.write(rec);
  if (!tb_) return;
  const auto step = rec["step"].get<std::int64_t>();
  for (const auto& [key, value] : rec.items()) {
    if (key == "step" || !value.is_number()) continue;
    const double v = value.get<double>();
    if (std::isfinite(v)) tb_->scalar(key, v, step);
  }
}

}  // namespace yeto
