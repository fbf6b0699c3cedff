#include "fleet/spec.hpp"

#include <cctype>
#include <charconv>

#include "core/error.hpp"

namespace yeto::fleet {
namespace {

constexpr const char* kGrammar = "cloud:[nodes x]<count>x<gpu>[@region], e.g. aws:8xH100, gcp:2x8xA100-80GB@us-central1, "
                                 "slurm:4xcpu";

[[noreturn]] void bad(std::string_view text, const std::string& what) {
  throw UsageError("--gpu '" + std::string(text) + "': " + what + " (expected " + kGrammar + ")");
}

bool name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '_' || c == '.';
}

bool all_name_chars(std::string_view s) {
  for (char c : s)
    if (!name_char(c)) return false;
  return !s.empty();
}

// A positive count with no sign, no leading zero and at most 5 digits; 0 otherwise.
int count_of(std::string_view s) {
  if (s.empty() || s.size() > 5 || s[0] == '0') return 0;
  int v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return 0;
  return v;
}

}  // namespace

bool IslandSpec::default_cloud() const { return cloud == "default" || cloud == "slurm" || cloud == "k8s"; }

std::string IslandSpec::to_string() const {
  std::string s = cloud + ":";
  if (nodes != 1) s += std::to_string(nodes) + "x";
  s += std::to_string(per_node) + "x" + gpu;
  if (!region.empty()) s += "@" + region;
  return s;
}

IslandSpec parse_island_spec(std::string_view text) {
  IslandSpec spec;
  const auto colon = text.find(':');
  if (colon == std::string_view::npos) bad(text, "no 'cloud:' prefix");
  spec.cloud = std::string(text.substr(0, colon));
  if (spec.cloud.empty()) bad(text, "the cloud before ':' is empty");
  if (!all_name_chars(spec.cloud)) bad(text, "the cloud '" + spec.cloud + "' may hold only letters, digits, '-', '_' and '.'");
  std::string_view rest = text.substr(colon + 1);
  if (const auto at = rest.find('@'); at != std::string_view::npos) {
    spec.region = std::string(rest.substr(at + 1));
    rest = rest.substr(0, at);
    if (spec.region.empty()) bad(text, "the region after '@' is empty");
    for (char c : spec.region)
      if (!name_char(c) && c != '/') bad(text, "the region '" + spec.region + "' holds '" + std::string(1, c) + "'");
  }
  // [nodes x]count x gpu: the gpu is everything after the last 'x' that follows a count. A gpu
  // name may itself hold an 'x' (e.g. "RTXA6000"), so split on the first one or two 'x' that
  // follow digits.
  std::size_t pos = 0;
  int numbers[2] = {0, 0};
  int n = 0;
  while (n < 2) {
    std::size_t end = pos;
    while (end < rest.size() && std::isdigit(static_cast<unsigned char>(rest[end])) != 0) ++end;
    if (end == pos || end >= rest.size() || (rest[end] != 'x' && rest[end] != 'X')) break;
    const int v = count_of(rest.substr(pos, end - pos));
    if (v == 0) bad(text, "'" + std::string(rest.substr(pos, end - pos)) + "' is not a count (1 .. 99999)");
    numbers[n++] = v;
    pos = end + 1;
  }
  if (n == 0) bad(text, "no '<count>x' before the accelerator name");
  spec.gpu = std::string(rest.substr(pos));
  if (spec.gpu.empty()) bad(text, "the accelerator name after 'x' is empty");
  if (!all_name_chars(spec.gpu)) bad(text, "the accelerator name '" + spec.gpu + "' may hold only letters, digits, '-', '_' and '.'");
  if (n == 2) {
    spec.nodes = numbers[0];
    spec.per_node = numbers[1];
  } else {
    spec.per_node = numbers[0];
  }
  if (spec.cpu_only() && spec.per_node > 1024) bad(text, "more than 1024 CPU ranks per node");
  if (!spec.cpu_only() && spec.per_node > 16) bad(text, std::to_string(spec.per_node) + " GPUs per node (at most 16)");
  if (spec.nodes > 4096) bad(text, std::to_string(spec.nodes) + " nodes (at most 4096)");
  return spec;
}

}  // namespace yeto::fleet
