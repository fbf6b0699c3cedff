// A component that wraps a LibTorch module (text encoders, VAEs, denoiser), so generic code
// can load weights into it and move it between devices without knowing its class.
#pragma once

#include <torch/nn/module.h>

#include "io/component_registry.hpp"

namespace yeto::io {

class ModuleComponent : public Component {
 public:
  virtual torch::nn::Module& module() = 0;
};

}  // namespace yeto::io
