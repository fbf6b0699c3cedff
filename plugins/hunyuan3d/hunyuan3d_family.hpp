// The torch-free side of the Hunyuan3D-2.1 shape family: its family file.
#pragma once

#include "yeto/family/description.hpp"

namespace yeto::hunyuan3d {

// hunyuan3d.family.json, parsed once: the descriptor fields (licence notice, alias hunyuan3d-21,
// the HunYuanDiTPlain class under its name and its upstream module path) and the LoRA target
// sets ("auto" = "attention": to_q, to_k, to_v, out_proj of attn1 and attn2 in every block).
const family::FamilyDescription& description();

}  // namespace yeto::hunyuan3d
