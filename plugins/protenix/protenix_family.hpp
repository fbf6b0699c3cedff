// The torch-free side of the Protenix family: its family file.
#pragma once

#include "yeto/family/description.hpp"

namespace yeto::protenix {

// protenix.family.json, parsed once: the descriptor fields (alias protenix-v2, the
// DiffusionModule under its class names, the parity case classes), the repository layout
// (diffusion_module, scheduler), the LoRA target sets ("auto" = "attention": the attention
// projections linear_q/k/v/o/g of every token and atom transformer block) and the tiny preset.
const family::FamilyDescription& description();

}  // namespace yeto::protenix
