#include "flux_family.hpp"

#include <stdexcept>

namespace yeto::flux {

using nlohmann::json;

GenerateRequest parse_generate_request(const json& j) {
  GenerateRequest r;
  family::read_generate_settings(family::RequestReader(j), {16, 512, "FLUX.1's T5 limit", false}, r);
  return r;
}

}  // namespace yeto::flux
