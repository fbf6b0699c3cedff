#include "sync/layout.hpp"

#include <algorithm>
#include <numeric>
#include <set>

#include "core/error.hpp"

namespace yeto::sync {

FragmentPattern parse_pattern(const std::string& s) {
  if (s == "binpack") return FragmentPattern::binpack;
  if (s == "strided") return FragmentPattern::strided;
  throw UsageError("unknown fragment pattern '" + s + "': use binpack or strided");
}

const char* pattern_name(FragmentPattern p) { return p == FragmentPattern::binpack ? "binpack" : "strided"; }

std::uint64_t Layout::total_numel() const {
  std::uint64_t n = 0;
  for (const auto& t : tensors) n += t.numel;
  return n;
}

namespace {
// FNV-1a 64: a stable, dependency-free hash; collisions only need to be unlikely, not hard.
void fnv(std::uint64_t& h, const void* data, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
}
}  // namespace

std::uint64_t Layout::fingerprint() const {
  std::uint64_t h = 1469598103934665603ull;
  const std::uint32_t f = static_cast<std::uint32_t>(fragments.size());
  const std::uint32_t pat = pattern == FragmentPattern::binpack ? 1 : 2;
  fnv(h, &f, sizeof f);
  fnv(h, &pat, sizeof pat);
  for (const auto& t : tensors) {
    const std::uint64_t len = t.name.size();
    fnv(h, &len, sizeof len);
    fnv(h, t.name.data(), t.name.size());
    fnv(h, &t.numel, sizeof t.numel);
  }
  return h;
}

Layout build_layout(std::vector<TensorSpec> tensors, std::uint32_t fragments, FragmentPattern pattern) {
  if (fragments == 0) throw UsageError("sync.fragments must be at least 1");
  if (fragments > tensors.size())
    throw UsageError("sync.fragments = " + std::to_string(fragments) + " but there are only " +
                     std::to_string(tensors.size()) + " trainable tensors: lower sync.fragments");
  std::set<std::string> seen;
  for (const auto& t : tensors) {
    if (!seen.insert(t.name).second) throw UsageError("trainable tensor name repeats: " + t.name);
    if (t.numel == 0) throw UsageError("trainable tensor " + t.name + " is empty");
  }
  Layout l;
  l.tensors = std::move(tensors);
  l.pattern = pattern;
  l.fragments.resize(fragments);
  const auto n = static_cast<std::uint32_t>(l.tensors.size());
  if (pattern == FragmentPattern::strided) {
    for (std::uint32_t i = 0; i < n; ++i) l.fragments[i % fragments].tensors.push_back(i);
  } else {
    std::vector<std::uint32_t> order(n);
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(),
                     [&](std::uint32_t a, std::uint32_t b) { return l.tensors[a].numel > l.tensors[b].numel; });
    std::vector<std::uint64_t> load(fragments, 0);
    for (std::uint32_t i : order) {
      const auto best = static_cast<std::uint32_t>(std::min_element(load.begin(), load.end()) - load.begin());
      l.fragments[best].tensors.push_back(i);
      load[best] += l.tensors[i].numel;
    }
    for (auto& f : l.fragments) std::sort(f.tensors.begin(), f.tensors.end());
  }
  for (auto& f : l.fragments)
    for (auto i : f.tensors) f.numel += l.tensors[i].numel;
  return l;
}

namespace {
void check_tensors(const Layout& layout, std::uint32_t p, std::size_t given) {
  if (p >= layout.fragments.size()) throw Error("fragment " + std::to_string(p) + " is out of range");
  if (given != layout.tensors.size())
    throw Error("expected " + std::to_string(layout.tensors.size()) + " trainable tensors, got " +
                std::to_string(given));
}
}  // namespace

void pack_fragment_into(const Layout& layout, std::uint32_t p, std::span<const std::span<const float>> tensors,
                        std::span<float> out) {
  check_tensors(layout, p, tensors.size());
  const Fragment& f = layout.fragments[p];
  if (out.size() != f.numel) throw Error("fragment buffer has the wrong length");
  std::size_t o = 0;
  for (auto i : f.tensors) {
    const auto& t = tensors[i];
    if (t.size() != layout.tensors[i].numel) throw Error("tensor " + layout.tensors[i].name + " has the wrong length");
    std::copy(t.begin(), t.end(), out.begin() + static_cast<std::ptrdiff_t>(o));
    o += t.size();
  }
}

std::vector<float> pack_fragment(const Layout& layout, std::uint32_t p, std::span<const std::span<const float>> tensors) {
  check_tensors(layout, p, tensors.size());
  std::vector<float> out(layout.fragments[p].numel);
  pack_fragment_into(layout, p, tensors, out);
  return out;
}

void apply_fragment(const Layout& layout, std::uint32_t p, std::span<const float> flat,
                    std::span<const std::span<float>> tensors, float alpha) {
  check_tensors(layout, p, tensors.size());
  const Fragment& f = layout.fragments[p];
  if (flat.size() != f.numel) throw Error("fragment " + std::to_string(p) + " has the wrong length");
  std::size_t o = 0;
  for (auto i : f.tensors) {
    const auto& t = tensors[i];
    if (t.size() != layout.tensors[i].numel) throw Error("tensor " + layout.tensors[i].name + " has the wrong length");
    if (alpha == 1.0f) {
      std::copy(flat.begin() + static_cast<std::ptrdiff_t>(o), flat.begin() + static_cast<std::ptrdiff_t>(o + t.size()),
                t.begin());
    } else {
      const float keep = 1.0f - alpha;
      for (std::size_t k = 0; k < t.size(); ++k) t[k] = alpha * flat[o + k] + keep * t[k];
    }
    o += t.size();
  }
}

std::uint64_t fragment_offset(std::uint32_t p, std::uint32_t fragments, std::uint64_t inner_steps) {
  if (fragments == 0) return 0;
  return (static_cast<std::uint64_t>(p) * inner_steps) / fragments;
}

bool fragment_due(std::uint32_t p, std::uint32_t fragments, std::uint64_t inner_steps, std::uint64_t step) {
  if (step == 0 || inner_steps == 0) return false;
  const std::uint64_t off = fragment_offset(p, fragments, inner_steps);
  return step >= off && (step - off) % inner_steps == 0;
}

}  // namespace yeto::sync
