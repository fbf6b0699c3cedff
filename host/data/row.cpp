#include "data/row.hpp"

namespace yeto::data {

const char* media_kind_name(MediaKind k) {
  switch (k) {
    case MediaKind::image: return "image";
    case MediaKind::video: return "video";
    case MediaKind::frames: return "frames";
    case MediaKind::latents: return "latents";
    case MediaKind::none: break;
  }
  return "none";
}

std::string ShapeKey::str() const {
  return (latent ? "latent " : "") + std::to_string(frames) + "x" + std::to_string(height) + "x" + std::to_string(width);
}

std::string Row::where() const {
  return manifest.string() + (jsonl ? " line " : " row ") + std::to_string(number);
}

std::string row_message(const Row& row, const std::string& message) {
  const std::string w = row.where();
  // Do not prefix twice when an inner layer already named the row.
  if (message.compare(0, w.size(), w) == 0) return message;
  return w + ": " + message;
}

}  // namespace yeto::data
