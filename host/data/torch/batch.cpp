#include "data/torch/batch.hpp"

#include <torch/torch.h>

#include "core/error.hpp"
#include "io/tensor_files.hpp"

namespace yeto::data {

namespace {

at::ScalarType scalar_type(const std::string& d) {
  if (d == "float32") return at::kFloat;
  if (d == "float64") return at::kDouble;
  if (d == "float16") return at::kHalf;
  if (d == "bfloat16") return at::kBFloat16;
  if (d == "int64") return at::kLong;
  if (d == "int32") return at::kInt;
  if (d == "int16") return at::kShort;
  if (d == "int8") return at::kChar;
  if (d == "uint8") return at::kByte;
  if (d == "bool") return at::kBool;
  throw Error("unsupported tensor dtype '" + d + "'", ExitCode::bad_input);
}

}  // namespace

at::Tensor generated_media(const std::vector<std::pair<std::string, at::Tensor>>& outputs, const std::string& who) {
  at::Tensor media;
  for (const auto& [name, t] : outputs)
    if (name == "video" || (name == "images" && !media.defined())) media = t;
  if (!media.defined() || (media.dim() != 4 && media.dim() != 5) || media.size(0) != 1 || media.size(1) != 3)
    throw Error(who + ": the plugin returned neither 'images' [1, 3, H, W] nor 'video' [1, 3, F, H, W]",
                ExitCode::failure);
  return media;
}

std::vector<std::uint8_t> media_to_rgb8(const at::Tensor& media) {
  const at::Tensor v = media.dim() == 3 ? media.unsqueeze(1) : media;
  const auto bytes =
      (v.detach().to(at::kFloat).cpu().clamp(0, 1) * 255).round().to(at::kByte).permute({1, 2, 3, 0}).contiguous();
  const auto* p = bytes.data_ptr<std::uint8_t>();
  return std::vector<std::uint8_t>(p, p + bytes.numel());
}

at::Tensor pixels_to_tensor(const Sample& s) {
  const auto f = s.shape.frames, h = s.shape.height, w = s.shape.width;
  if (static_cast<std::int64_t>(s.pixels.size()) != f * h * w * 3)
    throw Error("sample of row " + std::to_string(s.row) + " holds no decoded pixels of shape " + s.shape.str(), ExitCode::failure);
  at::Tensor t = torch::from_blob(const_cast<std::uint8_t*>(s.pixels.data()), {f, h, w, 3}, at::kByte)
                     .to(at::kFloat)
                     .div_(127.5)
                     .sub_(1.0);
  t = t.permute({3, 0, 1, 2}).contiguous();  // [3, F, H, W]
  return s.kind == MediaKind::image ? t.squeeze(1) : t;
}

at::Tensor raw_to_tensor(const RawTensor& raw) {
  const at::ScalarType st = scalar_type(raw.dtype);
  at::Tensor t = torch::empty(raw.shape, torch::TensorOptions().dtype(st));
  if (static_cast<std::size_t>(t.nbytes()) != raw.bytes.size())
    throw Error("tensor of shape " + shape_str(raw.shape) + " " + raw.dtype + " has " + std::to_string(raw.bytes.size()) + " bytes",
                ExitCode::bad_input);
  std::memcpy(t.data_ptr(), raw.bytes.data(), raw.bytes.size());
  return t;
}

at::Tensor load_tensor_file(const TensorRef& ref) {
  const std::string ext = lower_extension(ref.path);
  if (ext != ".pt" && ext != ".pth") return raw_to_tensor(read_tensor_raw(ref));
  const auto tensors = io::load_pt_tensors(ref.path);
  std::vector<std::string> names;
  for (const auto& [name, t] : tensors) {
    if (name == ref.key || (ref.key.empty() && tensors.size() == 1)) return t;
    names.push_back(name);
  }
  throw Error(ref.path.string() + (ref.key.empty() ? ": holds " + std::to_string(tensors.size()) + " tensors; name one as \"file.pt#NAME\""
                                                   : ": has no tensor '" + ref.key + "'"),
              ExitCode::bad_input);
}

TensorBatch collate(const std::vector<Sample>& samples) {
  TensorBatch b;
  if (samples.empty()) return b;
  const Sample& first = samples.front();
  std::vector<at::Tensor> pixels;
  std::map<std::string, std::vector<at::Tensor>> tensors;
  for (const Sample& s : samples) {
    if (s.kind != first.kind || s.shape != first.shape)
      throw Error("a micro batch mixes " + std::string(media_kind_name(first.kind)) + " " + first.shape.str() + " with " +
                      media_kind_name(s.kind) + " " + s.shape.str() + "; set data.bucket_by_shape = true or use micro_batch_size = 1",
                  ExitCode::usage);
    b.rows.push_back(s.row);
    b.prompts.push_back(s.has_prompt ? s.prompt : std::string());
    if (!s.pixels.empty()) pixels.push_back(pixels_to_tensor(s));
    for (const auto& [name, raw] : s.tensors) tensors[name].push_back(raw_to_tensor(raw));
    for (const auto& [name, ref] : s.deferred) tensors[name].push_back(load_tensor_file(ref));
  }
  if (!pixels.empty()) b.pixel_values = torch::stack(pixels);
  for (auto& [name, list] : tensors) {
    if (list.size() != samples.size())
      throw Error("cached tensor '" + name + "' is present in only " + std::to_string(list.size()) + " of " + std::to_string(samples.size()) +
                      " rows of a micro batch; give it to every row or to none",
                  ExitCode::bad_input);
    for (const auto& t : list)
      if (t.sizes() != list.front().sizes())
        throw Error("cached tensor '" + name + "' has shapes " + c10::str(list.front().sizes()) + " and " + c10::str(t.sizes()) +
                        " within one micro batch; set data.bucket_by_shape = true (cached tensors are never resized)",
                    ExitCode::bad_input);
    b.tensors[name] = torch::stack(list);
  }
  return b;
}

}  // namespace yeto::data
