#include "data/tensor_ref.hpp"

#include <cstring>
#include <mutex>

#include <nlohmann/json.hpp>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/strings.hpp"
#include "data/base64.hpp"
#include "io/npy.hpp"
#include "io/pickle.hpp"
#include "io/safetensors.hpp"
#include "io/zip_archive.hpp"

namespace yeto::data {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

[[noreturn]] void bad(const std::string& msg) { throw Error(msg, ExitCode::bad_input); }

void infer_nested(const json& v, std::size_t depth, std::vector<std::int64_t>& shape, std::vector<double>& out,
                  const std::string& field) {
  if (v.is_array()) {
    if (depth == shape.size()) {
      if (!out.empty()) bad("field '" + field + "': ragged nested list (rows of different depth)");
      shape.push_back(static_cast<std::int64_t>(v.size()));
    } else if (depth > shape.size() || shape[depth] != static_cast<std::int64_t>(v.size())) {
      bad("field '" + field + "': ragged nested list (not every row has " +
          (depth < shape.size() ? std::to_string(shape[depth]) : std::string("the same number of")) + " elements)");
    }
    for (const auto& x : v) infer_nested(x, depth + 1, shape, out, field);
    return;
  }
  if (v.is_boolean()) {
    if (depth != shape.size()) bad("field '" + field + "': ragged nested list");
    out.push_back(v.get<bool>() ? 1.0 : 0.0);
    return;
  }
  if (!v.is_number()) bad("field '" + field + "': tensor values must be numbers, found a " + std::string(v.type_name()));
  if (depth != shape.size()) bad("field '" + field + "': ragged nested list (a number where a list was expected)");
  out.push_back(v.get<double>());
}

std::string dtype_from_io(io::DType d) {
  switch (d) {
    case io::DType::F64: return "float64";
    case io::DType::F32: return "float32";
    case io::DType::F16: return "float16";
    case io::DType::BF16: return "bfloat16";
    case io::DType::F8_E4M3: return "float8_e4m3fn";
    case io::DType::F8_E5M2: return "float8_e5m2";
    case io::DType::I64: return "int64";
    case io::DType::I32: return "int32";
    case io::DType::I16: return "int16";
    case io::DType::I8: return "int8";
    case io::DType::U8: return "uint8";
    case io::DType::BOOL: return "bool";
  }
  return "unknown";
}

const io::TensorInfo& pick_safetensor(const io::SafetensorsFile& f, const TensorRef& ref) {
  if (ref.key.empty()) {
    if (f.tensors().size() != 1)
      bad(ref.path.string() + " holds " + std::to_string(f.tensors().size()) + " tensors; name the one to use as \"" +
          ref.path.filename().string() + "#NAME\" or {\"path\": ..., \"key\": NAME}");
    return f.tensors().front();
  }
  if (const io::TensorInfo* t = f.find(ref.key)) return *t;
  std::vector<std::string> names;
  for (const auto& t : f.tensors()) names.push_back(t.name);
  bad(ref.path.string() + " has no tensor '" + ref.key + "'" + did_you_mean(ref.key, names));
}

// The tensor a torch.save archive holds (or the one named by the key in a dict), torch-free:
// the weights-only unpickler gives its size and storage dtype.
TensorInfo probe_pt(const TensorRef& ref) {
  const io::ZipArchive zip = io::ZipArchive::open(ref.path);
  const io::ZipEntry* pkl = nullptr;
  for (const auto& e : zip.entries()) {
    const auto slash = e.name.find('/');
    if (slash != std::string::npos && e.name.substr(slash + 1) == "data.pkl") pkl = &e;
  }
  if (!pkl) bad(ref.path.string() + ": not a torch.save archive (no data.pkl); save it with torch.save(tensor, path)");
  const io::PickleResult r = io::unpickle_weights_only(zip.read(*pkl), ref.path.string());
  const io::PyValue* v = r.root;
  if (v && v->kind == io::PyValue::Kind::dict) {
    const io::PyValue* found = nullptr;
    std::vector<std::string> names;
    for (const auto& [k, val] : v->entries) {
      if (k->kind != io::PyValue::Kind::string || val->kind != io::PyValue::Kind::tensor) continue;
      names.push_back(k->text);
      if (k->text == ref.key || (ref.key.empty() && v->entries.size() == 1)) found = val;
    }
    if (!found)
      bad(ref.path.string() + (ref.key.empty() ? ": holds a dict of " + std::to_string(names.size()) + " tensors; name one as \"file.pt#NAME\""
                                               : " has no tensor '" + ref.key + "'" + did_you_mean(ref.key, names)));
    v = found;
  }
  if (!v || v->kind != io::PyValue::Kind::tensor || !v->storage)
    bad(ref.path.string() + ": holds no tensor; save a single tensor with torch.save(t, path)");
  TensorInfo info;
  info.dtype = dtype_from_io(v->storage->storage_dtype);
  info.shape = v->size;
  info.known = true;
  return info;
}

std::uint64_t file_size_or_throw(const fs::path& p) {
  std::error_code ec;
  const auto s = fs::file_size(p, ec);
  if (ec) bad(p.string() + ": cannot read (" + ec.message() + ")");
  if (s == 0) bad(p.string() + ": empty file (0 bytes); regenerate it");
  return s;
}

TensorInfo builtin_probe(const TensorRef& ref) {
  TensorInfo info;
  if (ref.is_inline) {
    info.dtype = ref.dtype;
    info.shape = ref.shape;
    info.known = true;
    return info;
  }
  const std::string ext = lower_extension(ref.path);
  file_size_or_throw(ref.path);
  if (ext == ".npy") {
    const io::NpyArray a = io::read_npy(ref.path);
    return {dtype_from_io(a.dtype), a.shape, true};
  }
  if (ext == ".safetensors") {
    const io::SafetensorsFile f = io::SafetensorsFile::open(ref.path);
    const io::TensorInfo& t = pick_safetensor(f, ref);
    return {dtype_from_io(t.dtype), t.shape, true};
  }
  return probe_pt(ref);
}

std::mutex& prober_mutex() {
  static std::mutex m;
  return m;
}
TensorProber& prober_slot() {
  static TensorProber p = builtin_probe;
  return p;
}

}  // namespace

std::size_t dtype_size(const std::string& d) {
  if (d == "float32" || d == "int32") return 4;
  if (d == "float64" || d == "int64") return 8;
  if (d == "float16" || d == "bfloat16" || d == "int16") return 2;
  if (d == "int8" || d == "uint8" || d == "bool" || d == "float8_e4m3fn" || d == "float8_e5m2") return 1;
  return 0;
}

std::string safetensors_dtype_name(const std::string& d) {
  static const std::pair<const char*, const char*> map[] = {
      {"float32", "F32"}, {"float64", "F64"}, {"float16", "F16"},  {"bfloat16", "BF16"}, {"int64", "I64"},
      {"int32", "I32"},   {"int16", "I16"},   {"int8", "I8"},      {"uint8", "U8"},      {"bool", "BOOL"},
      {"float8_e4m3fn", "F8_E4M3"}, {"float8_e5m2", "F8_E5M2"}};
  for (const auto& [k, v] : map)
    if (d == k) return v;
  return "";
}

std::int64_t element_count(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::string shape_str(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string TensorRef::describe() const {
  if (is_inline) return "inline " + dtype + shape_str(shape);
  return key.empty() ? path.string() : path.string() + "#" + key;
}

TensorRef parse_tensor_ref(const json& v, const std::string& field, const PathPolicy& policy) {
  TensorRef t;
  auto from_path = [&](std::string text, std::string key) {
    if (key.empty()) {
      const auto hash = text.find('#');
      if (hash != std::string::npos) {
        key = text.substr(hash + 1);
        text = text.substr(0, hash);
      }
    }
    const std::string ext = lower_extension(text);
    if (!is_tensor_extension(ext))
      bad("field '" + field + "': '" + text + "' is not a tensor file (.pt, .pth, .npy or .safetensors)");
    const ResolvedPath r = resolve_manifest_path(policy, text);
    if (!r.ok()) bad("field '" + field + "': " + r.error);
    std::error_code ec;
    if (!fs::is_regular_file(r.path, ec))
      bad("field '" + field + "': file not found: " + r.path.string() + " (relative paths resolve from the manifest's directory " +
          policy.root.string() + ")");
    t.path = r.path;
    t.key = std::move(key);
  };
  if (v.is_string()) {
    from_path(v.get<std::string>(), "");
    return t;
  }
  if (v.is_array()) {
    t.is_inline = true;
    t.dtype = "float32";
    infer_nested(v, 0, t.shape, t.values, field);
    return t;
  }
  if (v.is_object()) {
    if (auto p = v.find("path"); p != v.end()) {
      if (!p->is_string()) bad("field '" + field + ".path' must be a string, got " + std::string(p->type_name()));
      std::string key;
      if (auto k = v.find("key"); k != v.end()) {
        if (!k->is_string()) bad("field '" + field + ".key' must be a string");
        key = k->get<std::string>();
      }
      from_path(p->get<std::string>(), key);
      return t;
    }
    t.is_inline = true;
    t.dtype = "float32";
    if (auto d = v.find("dtype"); d != v.end()) {
      if (!d->is_string() || dtype_size(d->get<std::string>()) == 0)
        bad("field '" + field + ".dtype' must be one of float32, float64, float16, bfloat16, int64, int32, int16, int8, uint8, bool; got " + d->dump());
      t.dtype = d->get<std::string>();
    }
    auto s = v.find("shape");
    if (s != v.end()) {
      if (!s->is_array()) bad("field '" + field + ".shape' must be a list of integers");
      for (const auto& x : *s) {
        if (!x.is_number_integer() || x.get<std::int64_t>() < 0) bad("field '" + field + ".shape' must be a list of non-negative integers");
        t.shape.push_back(x.get<std::int64_t>());
      }
    }
    if (auto d = v.find("data"); d != v.end()) {
      std::vector<std::int64_t> inferred;
      if (d->is_array()) infer_nested(*d, 0, inferred, t.values, field + ".data");
      else bad("field '" + field + ".data' must be a (nested) list of numbers");
      if (s == v.end()) t.shape = inferred;
      else if (element_count(t.shape) != static_cast<std::int64_t>(t.values.size()))
        bad("field '" + field + "': shape " + shape_str(t.shape) + " needs " + std::to_string(element_count(t.shape)) +
            " values, data has " + std::to_string(t.values.size()));
      return t;
    }
    if (auto b = v.find("base64"); b != v.end()) {
      if (s == v.end()) bad("field '" + field + "': base64 tensor data needs a \"shape\"");
      if (!b->is_string()) bad("field '" + field + ".base64' must be a string");
      auto bytes = base64_decode(b->get<std::string>());
      if (!bytes) bad("field '" + field + ".base64' is not valid base64");
      const auto need = static_cast<std::size_t>(element_count(t.shape)) * dtype_size(t.dtype);
      if (bytes->size() != need)
        bad("field '" + field + "': shape " + shape_str(t.shape) + " of " + t.dtype + " needs " + std::to_string(need) + " bytes, base64 holds " +
            std::to_string(bytes->size()));
      t.bytes = std::move(*bytes);
      return t;
    }
    bad("field '" + field + "' is an object without \"path\", \"data\" or \"base64\"");
  }
  bad("field '" + field + "' must be a tensor file path, a nested list of numbers or {\"shape\", \"dtype\", \"data\"}, got " +
      std::string(v.type_name()));
}

void set_tensor_prober(TensorProber prober) {
  std::lock_guard<std::mutex> lock(prober_mutex());
  prober_slot() = prober ? std::move(prober) : TensorProber(builtin_probe);
}

TensorInfo probe_tensor(const TensorRef& ref) {
  TensorProber p;
  {
    std::lock_guard<std::mutex> lock(prober_mutex());
    p = prober_slot();
  }
  return p(ref);
}

RawTensor read_tensor_raw(const TensorRef& ref) {
  RawTensor out;
  if (ref.is_inline) {
    out.dtype = ref.dtype;
    out.shape = ref.shape;
    if (!ref.bytes.empty() || ref.values.empty()) {
      out.bytes = ref.bytes;
      return out;
    }
    // JSON numbers are stored as float32 unless a dtype says otherwise; values convert exactly
    // for every integer type and round to nearest for floats.
    const std::size_t es = dtype_size(out.dtype);
    out.bytes.resize(ref.values.size() * es);
    for (std::size_t i = 0; i < ref.values.size(); ++i) {
      const double v = ref.values[i];
      char* dst = out.bytes.data() + i * es;
      auto put = [&](auto x) { std::memcpy(dst, &x, sizeof(x)); };
      if (out.dtype == "float32") put(static_cast<float>(v));
      else if (out.dtype == "float64") put(v);
      else if (out.dtype == "int64") put(static_cast<std::int64_t>(v));
      else if (out.dtype == "int32") put(static_cast<std::int32_t>(v));
      else if (out.dtype == "int16") put(static_cast<std::int16_t>(v));
      else if (out.dtype == "int8") put(static_cast<std::int8_t>(v));
      else if (out.dtype == "uint8" || out.dtype == "bool") put(static_cast<std::uint8_t>(v));
      else if (out.dtype == "bfloat16") {
        const float f = static_cast<float>(v);
        std::uint32_t u;
        std::memcpy(&u, &f, 4);
        u += 0x7FFF + ((u >> 16) & 1);  // round to nearest even
        put(static_cast<std::uint16_t>(u >> 16));
      } else {
        throw Error("inline tensor of dtype " + out.dtype + " must be given as base64 bytes", ExitCode::bad_input);
      }
    }
    return out;
  }
  const std::string ext = lower_extension(ref.path);
  file_size_or_throw(ref.path);
  if (ext == ".npy") {
    const io::NpyArray a = io::read_npy(ref.path);
    if (a.fortran_order) bad(ref.path.string() + ": Fortran-order .npy arrays are not supported here; save with np.ascontiguousarray");
    out.dtype = dtype_from_io(a.dtype);
    out.shape = a.shape;
    out.bytes.assign(reinterpret_cast<const char*>(a.data.data()), a.data.size());
    return out;
  }
  if (ext == ".safetensors") {
    const io::SafetensorsFile f = io::SafetensorsFile::open(ref.path);
    const io::TensorInfo& t = pick_safetensor(f, ref);
    out.dtype = dtype_from_io(t.dtype);
    out.shape = t.shape;
    const auto b = f.bytes(t);
    out.bytes.assign(reinterpret_cast<const char*>(b.data()), b.size());
    return out;
  }
  throw Error(ref.path.string() + ": .pt/.pth tensors are read with LibTorch (yeto_data_torch)", ExitCode::bad_input);
}

}  // namespace yeto::data
