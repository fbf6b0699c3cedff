// The torch-free side of the NAVA family: its family file.
#pragma once

#include "yeto/family/description.hpp"

namespace yeto::nava {

// nava.family.json, parsed once: the descriptor fields (alias nava, the WanAVModel class under its
// name, its module path and the recorded reference classes), the pipeline layout (transformer),
// the LoRA target sets ("auto" = "attention": q, k, v, o and their _audio twins of every self-
// and cross-attention) and the tiny / wide presets.
const family::FamilyDescription& description();

}  // namespace yeto::nava
