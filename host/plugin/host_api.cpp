#include "plugin/host_api.hpp"

#include <ATen/DLConvertor.h>
#include <ATen/Functions.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>

#include "core/error.hpp"
#include "core/sha256.hpp"
#include "core/strings.hpp"
#include "core/version.hpp"
#include "yeto/status.hpp"
#include "yeto/tensor.hpp"

namespace yeto::plugin {
namespace {

struct Context {
  // bindings.back() is current; bindings.front() is what make_host_api was given.
  mutable std::mutex mutex;
  std::vector<std::shared_ptr<const HostApiOptions>> bindings;
  std::string host_version;
  std::string torch_version;
  yeto_host_api table{};

  std::shared_ptr<const HostApiOptions> current() const {
    std::lock_guard lock(mutex);
    return bindings.back();
  }
};

struct Rng {
  std::uint64_t seed;
  std::uint64_t state;
};

Context& ctx(void* host) { return *static_cast<Context*>(host); }

at::ScalarType to_scalar(int32_t d) {
  switch (d) {
    case YETO_DTYPE_F32: return at::kFloat;
    case YETO_DTYPE_F64: return at::kDouble;
    case YETO_DTYPE_F16: return at::kHalf;
    case YETO_DTYPE_BF16: return at::kBFloat16;
    case YETO_DTYPE_I64: return at::kLong;
    case YETO_DTYPE_I32: return at::kInt;
    case YETO_DTYPE_I16: return at::kShort;
    case YETO_DTYPE_I8: return at::kChar;
    case YETO_DTYPE_U8: return at::kByte;
    case YETO_DTYPE_BOOL: return at::kBool;
    default: sdk::fail(YETO_ERR_INVALID_ARGUMENT, "unknown yeto_dtype " + std::to_string(d));
  }
}

int32_t from_scalar(at::ScalarType s) {
  switch (s) {
    case at::kFloat: return YETO_DTYPE_F32;
    case at::kDouble: return YETO_DTYPE_F64;
    case at::kHalf: return YETO_DTYPE_F16;
    case at::kBFloat16: return YETO_DTYPE_BF16;
    case at::kLong: return YETO_DTYPE_I64;
    case at::kInt: return YETO_DTYPE_I32;
    case at::kShort: return YETO_DTYPE_I16;
    case at::kChar: return YETO_DTYPE_I8;
    case at::kByte: return YETO_DTYPE_U8;
    case at::kBool: return YETO_DTYPE_BOOL;
    default: return YETO_DTYPE_UNKNOWN;
  }
}

std::vector<int64_t> dims(int32_t ndim, const int64_t* shape) {
  if (ndim < 0 || ndim > YETO_MAX_DIMS || (ndim > 0 && !shape))
    sdk::fail(YETO_ERR_INVALID_ARGUMENT, "bad shape: ndim " + std::to_string(ndim));
  std::vector<int64_t> d(shape, shape + ndim);
  for (auto v : d)
    if (v < 0) sdk::fail(YETO_ERR_INVALID_ARGUMENT, "negative dimension in shape");
  return d;
}

at::Device device(int32_t type, int32_t index) {
  if (type == YETO_DEVICE_CPU) return at::Device(at::kCPU);
  if (type == YETO_DEVICE_CUDA) return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(index));
  sdk::fail(YETO_ERR_INVALID_ARGUMENT, "unknown device type " + std::to_string(type));
}

template <class F>
yeto_status run(yeto_error* e, F&& f) noexcept {
  try {
    std::forward<F>(f)();
    return YETO_OK;
  } catch (const c10::Error& x) {
    sdk::write_error(e, x.what_without_backtrace());
    return YETO_ERR_INVALID_ARGUMENT;
  } catch (...) {
    return sdk::detail::translate_current_exception(e);
  }
}

std::uint64_t splitmix64(std::uint64_t& s) {
  std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The pipeline component `name` of the current binding; NOT_FOUND naming what the pipeline has.
const yeto_component_v1* pipeline_component(void* host, const char* name, const std::string& call) {
  const std::string n = name ? name : "";
  const auto o = ctx(host).current();
  if (!o->pipeline)
    sdk::fail(YETO_ERR_NOT_FOUND, call + "('" + n +
                                      "'): no pipeline is loaded for this plugin (components exist only once "
                                      "the host has built the plan load_pipeline returned, i.e. from prepare() on)");
  const yeto_component_v1* found = o->pipeline->find_component(n);
  if (!found) {
    if (const std::string why = o->pipeline->missing_reason(n); !why.empty())
      sdk::fail(YETO_ERR_NOT_FOUND, call + "('" + n + "'): " + why);
    const auto names = o->pipeline->component_names();
    sdk::fail(YETO_ERR_NOT_FOUND, call + "('" + n + "'): the pipeline has no component of that name" +
                                      did_you_mean(n, names) + " (it has: " +
                                      (names.empty() ? std::string("none") : join(names, ", ")) + ")");
  }
  return found;
}

template <class S>
S* service_out(S* out, const char* call) {
  if (!out) sdk::fail(YETO_ERR_INVALID_ARGUMENT, std::string(call) + ": no result pointer given");
  *out = nullptr;
  return out;
}

// The typed service of pipeline component `name` that `get` reads from its table; UNSUPPORTED
// when it has none (a component of another kind, or a plugin's own class).
template <class Get>
auto service_of(void* host, const char* name, const std::string& call, const char* kind, Get get) {
  const yeto_component_v1* c = pipeline_component(host, name, call);
  const auto* s = get(c);
  if (!s)
    sdk::fail(YETO_ERR_UNSUPPORTED, call + "('" + (name ? name : "") + "'): the pipeline's " + (name ? name : "") +
                                        " is " + (c->class_name ? c->class_name : "a component") + ", which offers no " +
                                        kind +
                                        " service (host classes offer the service of their kind; a plugin's own "
                                        "class is called through component_get)");
  return s;
}

}  // namespace

nlohmann::json config_values(const config::Config& cfg) {
  nlohmann::json out = nlohmann::json::object();
  const nlohmann::json all = cfg.to_json();  // keep it alive: items() only refers to it
  for (const auto& [k, v] : all.items()) out[k] = v.contains("value") ? v["value"] : v;
  return out;
}

std::uint64_t stream_seed(std::uint64_t seed, std::int64_t logical_rank, const std::string& name) {
  const std::string h = sha256_hex("yeto-rng\n" + std::to_string(seed) + "\n" + std::to_string(logical_rank) + "\n" + name);
  return std::stoull(h.substr(0, 16), nullptr, 16);
}

const yeto_host_api* make_host_api(HostApiOptions options) {
  auto* c = new Context();  // lives for the process: plugins keep the pointer
  if (!options.components) options.components = &ComponentRegistry::global();
  c->bindings.push_back(std::make_shared<const HostApiOptions>(std::move(options)));
  c->host_version = build_info().version;
  c->torch_version = build_info().torch_version;
  yeto_host_api& t = c->table;
  t.struct_size = sizeof(yeto_host_api);
  t.abi_version = YETO_ABI_VERSION;
  t.host = c;
  t.host_version = c->host_version.c_str();
  t.torch_version = c->torch_version.c_str();

  t.log = [](void* host, int32_t level, const char* message) {
    const auto lvl = level <= YETO_LOG_TRACE   ? spdlog::level::trace
                     : level == YETO_LOG_DEBUG ? spdlog::level::debug
                     : level == YETO_LOG_INFO  ? spdlog::level::info
                     : level == YETO_LOG_WARN  ? spdlog::level::warn
                                               : spdlog::level::err;
    spdlog::log(lvl, "[plugin {}] {}", ctx(host).current()->plugin_name, message ? message : "");
  };

  t.tensor_zeros = [](void*, int32_t dtype, int32_t ndim, const int64_t* shape, int32_t dev, int32_t index,
                      yeto_tensor* out, yeto_error* e) {
    return run(e, [&] {
      *out = sdk::to_handle(at::zeros(dims(ndim, shape), at::TensorOptions().dtype(to_scalar(dtype)).device(device(dev, index))));
    });
  };
  t.tensor_from_data = [](void*, int32_t dtype, int32_t ndim, const int64_t* shape, const void* data, size_t bytes,
                          yeto_tensor* out, yeto_error* e) {
    return run(e, [&] {
      at::Tensor x = at::empty(dims(ndim, shape), at::TensorOptions().dtype(to_scalar(dtype)));
      const size_t need = static_cast<size_t>(x.numel()) * x.element_size();
      if (bytes != need)
        sdk::fail(YETO_ERR_INVALID_ARGUMENT,
                  "tensor_from_data: " + std::to_string(bytes) + " bytes given, the shape needs " + std::to_string(need));
      if (need) std::memcpy(x.data_ptr(), data, need);
      *out = sdk::to_handle(std::move(x));
    });
  };
  t.tensor_info = [](void*, yeto_tensor h, yeto_tensor_info* info, yeto_error* e) {
    return run(e, [&] {
      if (!h || !info) sdk::fail(YETO_ERR_INVALID_ARGUMENT, "tensor_info: null tensor or info");
      const at::Tensor x = sdk::borrow(h);
      if (x.dim() > YETO_MAX_DIMS) sdk::fail(YETO_ERR_UNSUPPORTED, "tensor has more than YETO_MAX_DIMS dimensions");
      // Writes only what the caller's struct covers.
      yeto_tensor_info full{};
      full.struct_size = sizeof full;
      full.abi_version = YETO_ABI_VERSION;
      full.dtype = from_scalar(x.scalar_type());
      full.device_type = x.is_cuda() ? YETO_DEVICE_CUDA : YETO_DEVICE_CPU;
      full.device_index = x.is_cuda() ? x.device().index() : -1;
      full.ndim = static_cast<int32_t>(x.dim());
      for (int64_t i = 0; i < x.dim(); ++i) full.shape[i] = x.size(i);
      full.requires_grad = x.requires_grad() ? 1u : 0u;
      full.is_contiguous = x.is_contiguous() ? 1u : 0u;
      const size_t n = std::min<size_t>(info->struct_size, sizeof full);
      if (n < offsetof(yeto_tensor_info, dtype)) sdk::fail(YETO_ERR_INVALID_ARGUMENT, "tensor_info: struct_size too small");
      std::memcpy(info, &full, n);
      info->struct_size = static_cast<uint32_t>(n);
    });
  };
  t.tensor_copy_to = [](void*, yeto_tensor h, void* data, size_t bytes, yeto_error* e) {
    return run(e, [&] {
      if (!h) sdk::fail(YETO_ERR_INVALID_ARGUMENT, "tensor_copy_to: null tensor");
      const at::Tensor x = sdk::borrow(h).detach().to(at::kCPU).contiguous();
      const size_t need = static_cast<size_t>(x.numel()) * x.element_size();
      if (bytes != need)
        sdk::fail(YETO_ERR_INVALID_ARGUMENT,
                  "tensor_copy_to: buffer is " + std::to_string(bytes) + " bytes, the tensor has " + std::to_string(need));
      if (need) std::memcpy(data, x.data_ptr(), need);
    });
  };
  t.tensor_retain = [](void*, yeto_tensor h, yeto_tensor* out, yeto_error* e) {
    return run(e, [&] { *out = sdk::to_handle(sdk::borrow(h)); });
  };
  t.tensor_release = [](void*, yeto_tensor h) { sdk::release(h); };
  t.tensor_to_dlpack = [](void*, yeto_tensor h, DLManagedTensor** out, yeto_error* e) {
    return run(e, [&] {
      if (!h) sdk::fail(YETO_ERR_INVALID_ARGUMENT, "tensor_to_dlpack: null tensor");
      *out = at::toDLPack(sdk::borrow(h).detach());
    });
  };
  t.tensor_from_dlpack = [](void*, DLManagedTensor* m, yeto_tensor* out, yeto_error* e) {
    return run(e, [&] {
      if (!m) sdk::fail(YETO_ERR_INVALID_ARGUMENT, "tensor_from_dlpack: null tensor");
      *out = sdk::to_handle(at::fromDLPack(m));
    });
  };
  t.config_get = [](void* host, const char* key, const yeto_text_out* out, yeto_error* e) {
    return run(e, [&] {
      const auto o = ctx(host).current();
      const auto& values = o->config_values;
      if (!key || !values.contains(key))
        sdk::fail(YETO_ERR_NOT_FOUND, std::string("no configuration key '") + (key ? key : "") + "'");
      const std::string s = values.at(key).dump();
      if (out && out->write) out->write(out->context, s.data(), s.size());
    });
  };
  t.rng_create = [](void* host, const char* name, yeto_rng* out, yeto_error* e) {
    return run(e, [&] {
      if (!name || !*name) sdk::fail(YETO_ERR_INVALID_ARGUMENT, "rng_create: a stream needs a name");
      const auto o = ctx(host).current();
      // LoRA initialisation is the same on every island and rank (DiLoCo starts all islands
      // from one state): streams named lora_init* ignore the logical rank.
      const std::string n = name;
      const std::int64_t rank = n.rfind("lora_init", 0) == 0 ? 0 : o->logical_rank;
      const std::uint64_t s = stream_seed(o->seed, rank, std::string("plugin/") + o->plugin_name + "/" + n);
      *out = reinterpret_cast<yeto_rng>(new Rng{s, s});
    });
  };
  t.rng_next_u64 = [](void*, yeto_rng r) -> uint64_t { return r ? splitmix64(reinterpret_cast<Rng*>(r)->state) : 0; };
  t.rng_seed = [](void*, yeto_rng r) -> uint64_t { return r ? reinterpret_cast<Rng*>(r)->seed : 0; };
  t.rng_release = [](void*, yeto_rng r) { delete reinterpret_cast<Rng*>(r); };
  t.component_create = [](void* host, const char* class_name, const char* config_json, const char* dir,
                          const yeto_component_v1** out, yeto_error* e) {
    return run(e, [&] {
      try {
        *out = ctx(host).current()->components->create(class_name ? class_name : "",
                                                       config_json ? config_json : "{}", dir ? dir : "");
      } catch (const Error& x) {
        sdk::fail(x.code() == ExitCode::not_found ? YETO_ERR_NOT_FOUND : YETO_ERR_INTERNAL, x.what());
      }
    });
  };
  t.component_get = [](void* host, const char* name, const yeto_component_v1** out, yeto_error* e) {
    return run(e, [&] {
      if (!out) sdk::fail(YETO_ERR_INVALID_ARGUMENT, "component_get: no result pointer given");
      *out = nullptr;
      *out = pipeline_component(host, name, "component_get");
    });
  };
  // Each reads its field only from tables that are large enough to have it.
  t.vae_get = [](void* host, const char* name, const yeto_vae_service** out, yeto_error* e) {
    return run(e, [&] {
      *service_out(out, "vae_get") = service_of(host, name, "vae_get", "VAE", [](const yeto_component_v1* comp) {
        return YETO_HAS_FIELD(yeto_component_v1, comp, vae) ? comp->vae : nullptr;
      });
    });
  };
  t.text_encoder_get = [](void* host, const char* name, const yeto_text_encoder_service** out, yeto_error* e) {
    return run(e, [&] {
      *service_out(out, "text_encoder_get") =
          service_of(host, name, "text_encoder_get", "text encoder", [](const yeto_component_v1* comp) {
            return YETO_HAS_FIELD(yeto_component_v1, comp, text_encoder) ? comp->text_encoder : nullptr;
          });
    });
  };
  t.tokenizer_get = [](void* host, const char* name, const yeto_tokenizer_service** out, yeto_error* e) {
    return run(e, [&] {
      *service_out(out, "tokenizer_get") =
          service_of(host, name, "tokenizer_get", "tokenizer", [](const yeto_component_v1* comp) {
            return YETO_HAS_FIELD(yeto_component_v1, comp, tokenizer) ? comp->tokenizer : nullptr;
          });
    });
  };
  t.scheduler_get = [](void* host, const char* name, const yeto_scheduler_service** out, yeto_error* e) {
    return run(e, [&] {
      *service_out(out, "scheduler_get") =
          service_of(host, name, "scheduler_get", "scheduler", [](const yeto_component_v1* comp) {
            return YETO_HAS_FIELD(yeto_component_v1, comp, scheduler) ? comp->scheduler : nullptr;
          });
    });
  };
  t.shard_group = [](void* host, int32_t* rank, int32_t* world_size, yeto_error* e) {
    return run(e, [&] {
      if (!rank || !world_size) sdk::fail(YETO_ERR_INVALID_ARGUMENT, "shard_group: no result pointer given");
      const auto o = ctx(host).current();
      if (!o->shard_group)
        sdk::fail(YETO_ERR_NOT_FOUND, "shard_group: this run keeps the whole frozen base on every rank "
                                      "(train.shard is not \"fsdp\")");
      *rank = o->shard_group->rank();
      *world_size = o->shard_group->world_size();
    });
  };
  t.shard_all_gather = [](void* host, yeto_tensor shard, yeto_tensor out, yeto_error* e) {
    return run(e, [&] {
      const auto o = ctx(host).current();
      if (!o->shard_group)
        sdk::fail(YETO_ERR_NOT_FOUND, "shard_all_gather: this run does not shard the frozen base");
      if (!shard || !out) sdk::fail(YETO_ERR_INVALID_ARGUMENT, "shard_all_gather: a tensor handle is NULL");
      const at::Tensor s = sdk::borrow(shard), d = sdk::borrow(out);
      if (s.scalar_type() != at::kByte || d.scalar_type() != at::kByte || !s.is_contiguous() || !d.is_contiguous() ||
          d.numel() != s.numel() * o->shard_group->world_size() || s.device() != d.device())
        sdk::fail(YETO_ERR_INVALID_ARGUMENT,
                  "shard_all_gather: expected contiguous uint8 tensors of n and n x world_size (" +
                      std::to_string(o->shard_group->world_size()) + ") bytes on one device, got " +
                      std::to_string(s.numel()) + " and " + std::to_string(d.numel()));
      try {
        o->shard_group->all_gather(shard, out);
      } catch (const Error& x) {
        sdk::fail(YETO_ERR_IO, x.what());
      }
    });
  };
  return &c->table;
}

void bind_host_api(const yeto_host_api* api, HostApiOptions options) {
  if (!api || !api->host) throw Error("bind_host_api: no host API table");
  Context& c = ctx(api->host);
  if (!options.components) options.components = &ComponentRegistry::global();
  std::lock_guard lock(c.mutex);
  c.bindings.push_back(std::make_shared<const HostApiOptions>(std::move(options)));
}

void unbind_host_api(const yeto_host_api* api, const ComponentSource* pipeline) {
  if (!api || !api->host || !pipeline) return;
  Context& c = ctx(api->host);
  std::lock_guard lock(c.mutex);
  // Never the base binding; the newest binding of that pipeline.
  for (auto it = c.bindings.rbegin(); it != c.bindings.rend(); ++it) {
    if ((*it)->pipeline == pipeline && std::next(it) != c.bindings.rend()) {
      c.bindings.erase(std::next(it).base());
      return;
    }
  }
  // The base binding names this pipeline: it stays, without its components.
  auto& base = c.bindings.front();
  if (base->pipeline == pipeline) {
    auto copy = std::make_shared<HostApiOptions>(*base);
    copy->pipeline = nullptr;
    base = std::move(copy);
  }
}

}  // namespace yeto::plugin
