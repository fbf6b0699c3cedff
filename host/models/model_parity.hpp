// check-parity kinds of the shared models: `autoencoder` (AutoencoderKL) and `text_encoder`
// (CLIPTextModel, CLIPTextModelWithProjection, T5EncoderModel, UMT5EncoderModel). Both are
// class-dispatched kinds, so a family plugin can add its own classes of the same kind (a video
// VAE) with parity::register_class.
#pragma once

namespace yeto::models {

void register_model_parity_kinds();

}  // namespace yeto::models
