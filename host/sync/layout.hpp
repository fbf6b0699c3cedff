// Fragment layout: how the canonical list of trainable tensors (in canonical-name order)
// is cut into F fragments that each sync on their own schedule. The same pure functions
// build, pack and apply a layout in the syncer, in the client and in every backend, so
// two processes that agree on (tensor specs, F, pattern) agree on every byte of every
// fragment. Torch-free: tensors are float32 spans.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace yeto::sync {

struct TensorSpec {
  std::string name;
  std::uint64_t numel = 0;
};

enum class FragmentPattern { binpack, strided };

FragmentPattern parse_pattern(const std::string& s);  // "binpack" | "strided"; throws UsageError
const char* pattern_name(FragmentPattern p);

struct Fragment {
  std::vector<std::uint32_t> tensors;  // indices into Layout::tensors, ascending (canonical order)
  std::uint64_t numel = 0;             // sum of their numels: the fragment's flat length
};

struct Layout {
  std::vector<TensorSpec> tensors;  // canonical order, as given
  FragmentPattern pattern = FragmentPattern::binpack;
  std::vector<Fragment> fragments;
  std::uint64_t total_numel() const;
  // 64-bit fingerprint of (names, numels, F, pattern); peers with different layouts refuse each other.
  std::uint64_t fingerprint() const;
};

// Builds the layout. binpack: tensors sorted by size (largest first, ties by canonical index)
// each go to the fragment with the smallest total so far (ties: lowest fragment index);
// strided: tensor i goes to fragment i mod F. Throws UsageError when F is 0, when F exceeds
// the number of tensors (a fragment would be empty) or when names repeat.
Layout build_layout(std::vector<TensorSpec> tensors, std::uint32_t fragments, FragmentPattern pattern);

// Copies fragment p out of the tensors (tensors[i] has tensors[i].numel floats) into one flat
// vector: its tensors concatenated in canonical order.
std::vector<float> pack_fragment(const Layout& layout, std::uint32_t p, std::span<const std::span<const float>> tensors);
void pack_fragment_into(const Layout& layout, std::uint32_t p, std::span<const std::span<const float>> tensors,
                        std::span<float> out);
// Writes a flat fragment back into the tensors. blend = alpha: t = alpha*flat + (1-alpha)*t;
// alpha == 1 copies exactly.
void apply_fragment(const Layout& layout, std::uint32_t p, std::span<const float> flat,
                    std::span<const std::span<float>> tensors, float alpha = 1.0f);

// Streaming-DiLoCo staggering: fragment p is pushed after inner steps t with
// t >= 1 and (t - offset(p)) mod H == 0, offset(p) = floor(p * H / F) (so F fragments spread
// evenly over one period of H steps instead of all syncing at once).
std::uint64_t fragment_offset(std::uint32_t p, std::uint32_t fragments, std::uint64_t inner_steps);
bool fragment_due(std::uint32_t p, std::uint32_t fragments, std::uint64_t inner_steps, std::uint64_t step);

}  // namespace yeto::sync
