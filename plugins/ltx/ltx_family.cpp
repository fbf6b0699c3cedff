#include "ltx_family.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace yeto::ltx {

using nlohmann::json;

double calculate_shift(double seq_len, double base_seq_len, double max_seq_len, double base_shift, double max_shift) {
  const double m = (max_shift - base_shift) / (max_seq_len - base_seq_len);
  const double b = base_shift - m * base_seq_len;
  return seq_len * m + b;
}

std::int64_t latent_frames(std::int64_t frames, std::int64_t ratio) { return (frames - 1) / ratio + 1; }

std::int64_t decoded_frames(std::int64_t frames, std::int64_t ratio) {
  return 1 + ratio * (latent_frames(frames, ratio) - 1);
}

GenerateRequest parse_generate_request(const json& j) {
  GenerateRequest r;
  const family::RequestReader in(j);
  family::read_generate_settings(in, {}, r);
  r.num_frames = in.integer("num_frames", r.num_frames, 1);
  r.frame_rate = in.number("fps", in.number("frame_rate", r.frame_rate));
  if (!(r.frame_rate > 0)) family::invalid("generate request: 'fps' (the frame rate) must be positive");
  r.decode_timestep = in.number("decode_timestep", r.decode_timestep);
  if (in.has("decode_noise_scale")) r.decode_noise_scale = in.number("decode_noise_scale", 0.0);
  return r;
}

}  // namespace yeto::ltx
