/* Yeto plugin C ABI, version 1.3.
 *
 * A model-family plugin is a shared library that exports exactly one symbol,
 * yeto_plugin_entry (see the end of this file). Everything else crosses as plain C:
 * fixed-width integers, NUL-terminated UTF-8 strings, JSON text for metadata, opaque
 * tensor handles and tables of function pointers. No C++ type ever crosses this boundary,
 * so the header compiles as C11 and as C++.
 *
 * Versioning
 *   Every struct starts with `uint32_t struct_size; uint32_t abi_version;`. struct_size is
 *   sizeof() of the struct as the writer compiled it; abi_version is YETO_ABI_VERSION of the
 *   writer. A reader accepts a struct whose ABI major equals its own and reads only the
 *   fields that struct_size covers (YETO_HAS_FIELD); fields beyond it count as absent
 *   (NULL / 0). New fields are only ever appended, so both sides can grow within a major.
 *
 * Ownership (applies to every function below unless its comment says otherwise)
 *   - `const char*` arguments are borrowed: valid for the duration of the call only.
 *   - yeto_tensor arguments are borrowed: the callee must not release them; to keep one
 *     beyond the call it takes its own reference with yeto_host_api.tensor_retain.
 *   - yeto_tensor results written through `yeto_tensor*` or pushed into a
 *     yeto_named_tensors_out are owned references that pass to the receiver, which
 *     releases each exactly once (yeto_host_api.tensor_release).
 *   - Text results go through a yeto_text_out that the caller owns; the callee copies
 *     its bytes into it and keeps no pointer to it after returning.
 *   - Descriptor and hook tables returned by a plugin stay valid and unchanged for the
 *     life of the process (the host never unloads a plugin).
 *
 * Errors
 *   Every fallible call returns a yeto_status and takes a yeto_error* (possibly NULL). On
 *   failure the callee writes a NUL-terminated, human-readable message (truncated to fit)
 *   into it; the host logs that message verbatim. Messages carry no stack traces.
 *
 * Threads
 *   The yeto_host_api functions are thread-safe. The host never calls two hooks of the
 *   same plugin instance, or two methods of the same component, concurrently; different
 *   instances and components may be used from different threads. The descriptor may be
 *   read from any thread.
 *
 * Tensors
 *   A yeto_tensor is a handle to an at::TensorImpl of the process's single LibTorch
 *   (one intrusive reference). A LibTorch plugin converts it with the helpers in
 *   yeto/tensor.hpp at zero cost and with autograd intact; a plugin that does not link
 *   LibTorch uses the host API (create, inspect, DLPack export/import) instead.
 */
#ifndef YETO_PLUGIN_H
#define YETO_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- versions ------------------------------------------------------------------------- */

#define YETO_ABI_VERSION_MAJOR 1u
#define YETO_ABI_VERSION_MINOR 3u
#define YETO_MAKE_ABI_VERSION(major, minor) ((((uint32_t)(major)) << 16) | ((uint32_t)(minor) & 0xffffu))
#define YETO_ABI_VERSION YETO_MAKE_ABI_VERSION(YETO_ABI_VERSION_MAJOR, YETO_ABI_VERSION_MINOR)
#define YETO_ABI_MAJOR(v) (((uint32_t)(v)) >> 16)
#define YETO_ABI_MINOR(v) (((uint32_t)(v)) & 0xffffu)

/* True when a struct whose struct_size is `size` contains member `field` of `type`. */
#define YETO_HAS_FIELD(type, ptr, field) \
  ((ptr) != NULL && (size_t)(ptr)->struct_size >= offsetof(type, field) + sizeof(((type*)0)->field))

/* The name of the one exported symbol (see yeto_plugin_entry_fn). */
#define YETO_PLUGIN_ENTRY_SYMBOL "yeto_plugin_entry"

#if defined(_WIN32)
#define YETO_PLUGIN_EXPORT __declspec(dllexport)
#else
#define YETO_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

/* ---- status and errors ---------------------------------------------------------------- */

typedef int32_t yeto_status;
enum {
  YETO_OK = 0,
  YETO_ERR_INVALID_ARGUMENT = 1, /* a bad argument or input (shape, dtype, JSON, name) */
  YETO_ERR_UNSUPPORTED = 2,      /* the hook or feature is not implemented */
  YETO_ERR_NOT_FOUND = 3,        /* a named class, key, tensor or file does not exist */
  YETO_ERR_OUT_OF_MEMORY = 4,
  YETO_ERR_IO = 5,               /* reading or writing a file failed */
  YETO_ERR_INTERNAL = 6          /* anything else (a bug): the message says what */
};

/* A caller-provided message buffer. The callee writes at most capacity-1 bytes plus a NUL
 * and sets length to the untruncated message length. */
typedef struct yeto_error {
  uint32_t struct_size;
  uint32_t abi_version;
  char* message;   /* owned by the caller; may be NULL when capacity is 0 */
  size_t capacity;
  size_t length;
} yeto_error;

/* ---- tensors -------------------------------------------------------------------------- */

typedef struct yeto_tensor_opaque* yeto_tensor; /* at::TensorImpl*, one reference */
struct DLManagedTensor;                          /* DLPack v0.6 (<ATen/dlpack.h>) */

typedef enum yeto_dtype {
  YETO_DTYPE_UNKNOWN = 0,
  YETO_DTYPE_F32 = 1,
  YETO_DTYPE_F64 = 2,
  YETO_DTYPE_F16 = 3,
  YETO_DTYPE_BF16 = 4,
  YETO_DTYPE_I64 = 5,
  YETO_DTYPE_I32 = 6,
  YETO_DTYPE_I16 = 7,
  YETO_DTYPE_I8 = 8,
  YETO_DTYPE_U8 = 9,
  YETO_DTYPE_BOOL = 10
} yeto_dtype;

typedef enum yeto_device_type { YETO_DEVICE_CPU = 0, YETO_DEVICE_CUDA = 1 } yeto_device_type;

#define YETO_MAX_DIMS 16

typedef struct yeto_tensor_info {
  uint32_t struct_size;
  uint32_t abi_version;
  int32_t dtype;        /* yeto_dtype */
  int32_t device_type;  /* yeto_device_type */
  int32_t device_index; /* -1: the current device */
  int32_t ndim;
  int64_t shape[YETO_MAX_DIMS];
  uint32_t requires_grad;
  uint32_t is_contiguous;
} yeto_tensor_info;

/* Named tensors passed in (borrowed, for the duration of the call). */
typedef struct yeto_named_tensors {
  uint32_t struct_size;
  uint32_t abi_version;
  size_t count;
  const char* const* names;  /* count entries */
  const yeto_tensor* tensors; /* count entries */
} yeto_named_tensors;

/* A sink for named tensors produced by the callee. push() takes ownership of `tensor` in
 * every case (also when it fails) and copies `name`. */
typedef struct yeto_named_tensors_out {
  uint32_t struct_size;
  uint32_t abi_version;
  void* context; /* the caller's */
  yeto_status (*push)(void* context, const char* name, yeto_tensor tensor);
} yeto_named_tensors_out;

/* A sink for text (JSON) produced by the callee; write() may be called several times and
 * appends. */
typedef struct yeto_text_out {
  uint32_t struct_size;
  uint32_t abi_version;
  void* context; /* the caller's */
  void (*write)(void* context, const char* data, size_t length);
} yeto_text_out;

/* ---- typed services (ABI 1.2) ----------------------------------------------------------- */

/* What a VAE, a text encoder, a tokenizer and a scheduler do, as typed calls. A component
 * offers the service of its kind through its table (yeto_component_v1.vae, ...): the host's
 * built-in classes (AutoencoderKL, CLIPTextModel(WithProjection), T5EncoderModel,
 * UMT5EncoderModel, the CLIP/T5 tokenizers, every scheduler) offer theirs, and a plugin's own
 * VAE class may offer the VAE service (yeto/plugin.hpp: derive the component from sdk::Vae).
 * A plugin reaches the services of its pipeline by component name with yeto_host_api.vae_get /
 * text_encoder_get / tokenizer_get / scheduler_get. Each service's `self` is its own; pass it
 * back as the first argument. A service lives as long as its component. Inputs are borrowed
 * and may be of any floating dtype and device: the service moves them to where its module
 * computes; results are owned references in the module's dtype and device unless a comment
 * says otherwise. VAEs and text encoders compute without an autograd graph unless the call's
 * flags hold YETO_SERVICE_GRAD; scheduler calls never record one. */
#define YETO_SERVICE_GRAD (1u << 0)          /* record the autograd graph of the call */
#define YETO_SERVICE_HIDDEN_STATES (1u << 1) /* text encoders: also every layer's hidden state */

typedef struct yeto_vae_service {
  uint32_t struct_size;
  uint32_t abi_version;
  void* self;
  /* pixels [B, 3, H, W] (video VAEs: [B, 3, F, H, W]) in [-1, 1] -> the latent posterior's
   * mean and logvar, raw (before any shift or scaling factor), [B, C, H / f, W / f] (video:
   * [B, C, F', H / f, W / f]). */
  yeto_status (*encode)(void* self, yeto_tensor pixels, uint32_t flags, yeto_tensor* mean, yeto_tensor* logvar,
                        yeto_error* error);
  /* raw latents -> sample in the pixel layout, nominally in [-1, 1]. extra: the decoder's keyword
   * tensors ("temb" [B] for a timestep-conditioned decoder), NULL or empty for none; a tensor
   * the decoder does not take is refused by name. */
  yeto_status (*decode)(void* self, yeto_tensor latents, const yeto_named_tensors* extra, uint32_t flags,
                        yeto_tensor* sample, yeto_error* error);
} yeto_vae_service;

typedef struct yeto_text_encoder_service {
  uint32_t struct_size;
  uint32_t abi_version;
  void* self;
  /* input_ids [B, L] int64 and attention_mask [B, L] (1 = token; NULL: attend everywhere) ->
   * named outputs: "last_hidden_state" [B, L, D]; CLIP also "pooler_output" [B, D] or, with a
   * projection, "text_embeds" [B, P]; with YETO_SERVICE_HIDDEN_STATES also "hidden_states.<i>"
   * [B, L, D] for i = 0 (the embeddings) to the number of layers. */
  yeto_status (*encode)(void* self, yeto_tensor input_ids, yeto_tensor attention_mask, uint32_t flags,
                        const yeto_named_tensors_out* outputs, yeto_error* error);
} yeto_text_encoder_service;

typedef enum yeto_padding {
  YETO_PADDING_MAX_LENGTH = 0, /* every row padded to max_length */
  YETO_PADDING_LONGEST = 1,    /* to the longest row of the batch */
  YETO_PADDING_NONE = 2        /* no padding: the rows must come out equally long */
} yeto_padding;

typedef enum yeto_text_clean {
  YETO_CLEAN_NONE = 0,
  YETO_CLEAN_PROMPT = 1 /* Diffusers' prompt_clean (ftfy-style fixes, HTML unescape, whitespace) */
} yeto_text_clean;

typedef struct yeto_tokenize_options {
  uint32_t struct_size;
  uint32_t abi_version;
  int64_t max_length;          /* > 0; 0: the tokenizer's model_max_length */
  int32_t padding;             /* yeto_padding */
  int32_t clean;               /* yeto_text_clean, applied before tokenizing */
  uint32_t truncation;         /* nonzero: rows longer than max_length are cut */
  uint32_t add_special_tokens; /* nonzero: BOS/EOS as the tokenizer's configuration says */
} yeto_tokenize_options;

typedef struct yeto_tokenizer_service {
  uint32_t struct_size;
  uint32_t abi_version;
  void* self;
  /* count >= 1 texts -> input_ids and attention_mask, both [count, L] int64 on the CPU. */
  yeto_status (*tokenize)(void* self, size_t count, const char* const* texts, const yeto_tokenize_options* options,
                          yeto_tensor* input_ids, yeto_tensor* attention_mask, yeto_error* error);
} yeto_tokenizer_service;

typedef struct yeto_scheduler_service {
  uint32_t struct_size;
  uint32_t abi_version;
  void* self;
  /* The sampling schedule from num_inference_steps > 0, or from sigma_count > 0 sigmas (then
   * num_inference_steps is 0); mu (NULL: none) is the resolution shift of schedulers with
   * dynamic shifting. -> timesteps [N] in the scheduler's training scale, and *sigmas_out
   * [N + 1] float32 for sigma schedules (NULL for schedulers without sigmas). The schedule
   * is the scheduler's state: step() follows it. */
  yeto_status (*set_timesteps)(void* self, int64_t num_inference_steps, const double* sigmas, size_t sigma_count,
                               const double* mu, yeto_tensor* timesteps, yeto_tensor* sigmas_out, yeto_error* error);
  /* One sampling step: model_output and sample [B, ...], timestep one entry of the schedule
   * (a scalar tensor) -> prev_sample [B, ...]. */
  yeto_status (*step)(void* self, yeto_tensor model_output, yeto_tensor timestep, yeto_tensor sample,
                      yeto_tensor* prev_sample, yeto_error* error);
  /* The forward process: original and noise [B, ...], timesteps [B] -> noisy [B, ...]. */
  yeto_status (*add_noise)(void* self, yeto_tensor original, yeto_tensor noise, yeto_tensor timesteps,
                           yeto_tensor* noisy, yeto_error* error);
  /* A training batch as the host's learner draws it: x0 and noise [B, ...] float32, indices [B]
   * int64 into the training timesteps -> "noisy", "target" (the regression target), "timesteps"
   * [B], "alpha_t", "sigma_t" and "snr" [B], all float32 except timesteps. */
  yeto_status (*training_batch)(void* self, yeto_tensor x0, yeto_tensor noise, yeto_tensor indices,
                                const yeto_named_tensors_out* outputs, yeto_error* error);
} yeto_scheduler_service;

/* ---- components (Diffusers `_class_name` -> constructor) -------------------------------- */

/* One constructed component (a denoiser, a VAE, a text encoder). Owned by whoever
 * constructed it through a constructor; destroy() ends it. Components built with LibTorch
 * keep their parameters alive until destroy(). */
typedef struct yeto_component_v1 {
  uint32_t struct_size;
  uint32_t abi_version;
  void* self;
  const char* class_name; /* valid until destroy() */
  /* forward: inputs and options (JSON object, may be "{}") -> named outputs. */
  yeto_status (*forward)(void* self, const yeto_named_tensors* inputs, const char* options_json,
                         const yeto_named_tensors_out* outputs, yeto_error* error);
  /* Every parameter and buffer by its Diffusers name, in a deterministic order. */
  yeto_status (*parameters)(void* self, const yeto_named_tensors_out* out, yeto_error* error);
  /* Copies weights in by Diffusers name; JSON options: {"strict": bool}. */
  yeto_status (*load_weights)(void* self, const yeto_named_tensors* weights, const char* options_json,
                              yeto_error* error);
  void (*destroy)(void* self);

  /* ---- ABI 1.2 ---- */

  /* The typed service of the component's kind, NULL for the others (and for every component
   * whose table predates 1.2). Valid until destroy(). */
  const yeto_vae_service* vae;
  const yeto_text_encoder_service* text_encoder;
  const yeto_tokenizer_service* tokenizer;
  const yeto_scheduler_service* scheduler;
} yeto_component_v1;

/* Builds a component of `class_name` from its config.json text. `component_dir` is the
 * component's folder in the model repository (or NULL for a fresh, randomly initialised
 * one). On success *out points at a component the caller owns. */
typedef yeto_status (*yeto_component_ctor)(void* ctor_context, const char* class_name, const char* config_json,
                                           const char* component_dir, const yeto_component_v1** out,
                                           yeto_error* error);

/* The host's component registry, handed to yeto_plugin_v1.register_components. add()
 * copies class_name; ctor_context must live for the process (it usually is static). */
typedef struct yeto_component_registry {
  uint32_t struct_size;
  uint32_t abi_version;
  void* context; /* the host's */
  yeto_status (*add)(void* context, const char* class_name, yeto_component_ctor ctor, void* ctor_context,
                     yeto_error* error);
} yeto_component_registry;

/* ---- the host API (what a plugin may call) --------------------------------------------- */

typedef enum yeto_log_level {
  YETO_LOG_TRACE = 0,
  YETO_LOG_DEBUG = 1,
  YETO_LOG_INFO = 2,
  YETO_LOG_WARN = 3,
  YETO_LOG_ERROR = 4
} yeto_log_level;

typedef struct yeto_rng_opaque* yeto_rng;

typedef struct yeto_host_api {
  uint32_t struct_size;
  uint32_t abi_version;
  void* host;               /* pass back as the first argument of every function below */
  const char* host_version; /* "0.1.0" */
  const char* torch_version; /* the LibTorch the host runs, "1.13.0" */

  /* Logging: the message is logged verbatim, tagged with the plugin's name. */
  void (*log)(void* host, int32_t level, const char* message);

  /* Tensor handles. create_* return an owned reference in *out. */
  yeto_status (*tensor_zeros)(void* host, int32_t dtype, int32_t ndim, const int64_t* shape, int32_t device_type,
                              int32_t device_index, yeto_tensor* out, yeto_error* error);
  /* Copies `bytes` (row-major, exactly numel*element size) into a new CPU tensor. */
  yeto_status (*tensor_from_data)(void* host, int32_t dtype, int32_t ndim, const int64_t* shape, const void* data,
                                  size_t bytes, yeto_tensor* out, yeto_error* error);
  yeto_status (*tensor_info)(void* host, yeto_tensor tensor, yeto_tensor_info* info, yeto_error* error);
  /* Copies the tensor's elements (made contiguous, on CPU) into data. */
  yeto_status (*tensor_copy_to)(void* host, yeto_tensor tensor, void* data, size_t bytes, yeto_error* error);
  /* A new owned reference to the same tensor (not a copy). */
  yeto_status (*tensor_retain)(void* host, yeto_tensor tensor, yeto_tensor* out, yeto_error* error);
  /* Drops one reference; NULL is ignored. Never fails. */
  void (*tensor_release)(void* host, yeto_tensor tensor);

  /* DLPack v0.6. Export: *out is owned by the caller, who calls its deleter. Import takes
   * ownership of `managed` (its deleter runs when the tensor dies) and returns an owned
   * handle; it is zero-copy. DLPack tensors carry no autograd history. */
  yeto_status (*tensor_to_dlpack)(void* host, yeto_tensor tensor, struct DLManagedTensor** out, yeto_error* error);
  yeto_status (*tensor_from_dlpack)(void* host, struct DLManagedTensor* managed, yeto_tensor* out,
                                    yeto_error* error);

  /* The value of a run-configuration key as JSON text (`"cpu"`, `4`, `["a","b"]`). */
  yeto_status (*config_get)(void* host, const char* key, const yeto_text_out* out, yeto_error* error);

  /* Deterministic random streams keyed by name: the same run seed, logical rank and name
   * always give the same stream. Owned by the caller; release with rng_release. */
  yeto_status (*rng_create)(void* host, const char* name, yeto_rng* out, yeto_error* error);
  uint64_t (*rng_next_u64)(void* host, yeto_rng rng);
  /* The 64-bit seed of a stream, for seeding a LibTorch generator. */
  uint64_t (*rng_seed)(void* host, yeto_rng rng);
  void (*rng_release)(void* host, yeto_rng rng);

  /* Constructs a component by Diffusers class name from the host's registry (host
   * built-ins such as AutoencoderKL and classes registered by plugins). */
  yeto_status (*component_create)(void* host, const char* class_name, const char* config_json,
                                  const char* component_dir, const yeto_component_v1** out, yeto_error* error);

  /* ---- ABI 1.1 ---- */

  /* A component of the pipeline the host loaded for this plugin, by its model_index.json
   * name ("transformer", "vae", "text_encoder_2", "tokenizer", "scheduler"). The host built
   * it from the plan load_pipeline returned (host classes natively, the plugin's own classes
   * through their constructor, weights streamed in by the host). Borrowed: valid until the
   * plugin instance is destroyed; never destroy() it. YETO_ERR_NOT_FOUND when the pipeline
   * has no such component. A component of the plugin's own class can be recognised by its
   * class_name and its `self` cast back by the plugin that made it. From ABI 1.2 host
   * components are called through their typed services (below); for plugins built against
   * 1.0 and 1.1 their forward() still answers options {"method": ...} as docs/PLUGIN_SDK.md
   * ("Host components, the ABI 1.1 form") lists. */
  yeto_status (*component_get)(void* host, const char* name, const yeto_component_v1** out, yeto_error* error);

  /* ---- ABI 1.2 ---- */

  /* The typed service of the pipeline component `name` (component_get's name and lifetime):
   * YETO_ERR_NOT_FOUND when the pipeline has no such component, YETO_ERR_UNSUPPORTED when it
   * is not of that kind (the message names its class). Borrowed; *out is never NULL on
   * success. */
  yeto_status (*vae_get)(void* host, const char* name, const yeto_vae_service** out, yeto_error* error);
  yeto_status (*text_encoder_get)(void* host, const char* name, const yeto_text_encoder_service** out,
                                  yeto_error* error);
  yeto_status (*tokenizer_get)(void* host, const char* name, const yeto_tokenizer_service** out, yeto_error* error);
  yeto_status (*scheduler_get)(void* host, const char* name, const yeto_scheduler_service** out, yeto_error* error);

  /* ---- ABI 1.3 ---- */

  /* The island's sharding of the frozen base (train.shard = "fsdp"): this process is *rank of
   * *world_size ranks that each keep 1/world_size of every denoiser block's frozen parameters
   * (the family kit does it: nn::CheckpointedBlocks, docs/DESIGN.md). YETO_ERR_NOT_FOUND when
   * the run keeps whole weights (any other shard mode, sampling, export). */
  yeto_status (*shard_group)(void* host, int32_t* rank, int32_t* world_size, yeto_error* error);
  /* All-gather of equal byte shards over the island's ranks (a collective: every rank calls it
   * in the same order): `shard` a contiguous uint8 tensor of n bytes (the same n on every rank),
   * `out` a contiguous uint8 tensor of n * world_size bytes on the same device, which receives
   * rank r's shard at byte r * n. A rank that died or timed out fails it (YETO_ERR_IO, the
   * message names the rank that saw it). */
  yeto_status (*shard_all_gather)(void* host, yeto_tensor shard, yeto_tensor out, yeto_error* error);
} yeto_host_api;

/* ---- the plugin descriptor ------------------------------------------------------------- */

/* Capability bits: which hook groups a plugin implements. A declared capability's hooks
 * must be non-NULL; an undeclared group is left to the host's generic path. */
#define YETO_CAP_PIPELINE (1ull << 0)            /* load_pipeline, prepare */
#define YETO_CAP_COMPONENTS (1ull << 1)          /* register_components */
#define YETO_CAP_TRAINABLE (1ull << 2)           /* trainable_parameters */
#define YETO_CAP_ENCODE_MEDIA (1ull << 3)        /* encode_media */
#define YETO_CAP_ENCODE_CONDITIONING (1ull << 4) /* encode_conditioning */
#define YETO_CAP_DENOISER (1ull << 5)            /* denoiser_kwargs, denoise */
#define YETO_CAP_ALIGN (1ull << 6)               /* align */
#define YETO_CAP_LOSS_STEP (1ull << 7)           /* loss_step (full-step adapters) */
#define YETO_CAP_ARTIFACTS (1ull << 8)           /* save_artifact, load_artifact */
#define YETO_CAP_GENERATE (1ull << 9)            /* generate */
#define YETO_CAP_PRESETS (1ull << 10)            /* presets (ABI 1.1) */

typedef struct yeto_plugin_descriptor {
  uint32_t struct_size;
  uint32_t abi_version;
  const char* name;                /* unique plugin name: [a-z0-9][a-z0-9._-]* */
  const char* version;             /* the plugin's own version, "1.2.0" */
  const char* const* families;     /* NULL-terminated: model families served ("flux") */
  const char* const* aliases;      /* NULL-terminated: model aliases ("flux-dev"), may be empty */
  uint64_t capabilities;           /* YETO_CAP_* */
  const char* torch_version;       /* LibTorch built against ("1.13.0"), "" when none is linked */
  const char* license_notice;      /* shown to the user; "" when none */
  uint32_t license_must_acknowledge; /* nonzero: refused until the user accepts the notice */
} yeto_plugin_descriptor;

/* ---- the plugin's hook table ------------------------------------------------------------ */

/* Hooks operate on an instance made by create(). JSON arguments are objects unless noted;
 * every hook may be NULL when its capability is not declared. */
typedef struct yeto_plugin_v1 {
  uint32_t struct_size;
  uint32_t abi_version;
  const yeto_plugin_descriptor* descriptor;

  /* Instance lifecycle. config_json: the resolved run configuration ({key: value}). */
  yeto_status (*create)(const char* config_json, void** instance, yeto_error* error);
  void (*destroy)(void* instance);

  /* Load/prepare (capability pipeline).
   * load_pipeline gets the model directory and its model_index.json text and writes a JSON plan
   *   {"components": {"<name>": {"class": "<_class_name>", "dir": "<folder, relative to the model
   *   directory or absolute>", "kind": "denoiser" | "vae" | "text_encoder" | "tokenizer" |
   *   "scheduler" | ...} or null}, "boundary_ratio": <number, optional>}.
   *   The host starts from model_index.json's components ({"class", "dir"} each; a [null, null]
   *   entry is absent) and lays each plan entry over its namesake, key by key; null removes one.
   *   "kind" defaults from the name (transformer*, unet*, prior, model: denoiser; vae*: vae;
   *   text_encoder*: text_encoder; tokenizer*: tokenizer; scheduler: scheduler). The host then
   *   builds every component (host classes natively, the plugin's own through its constructor)
   *   and streams each folder's weights in. "boundary_ratio" (also read from model_index.json)
   *   times num_train_timesteps is the timestep that routes rows between two denoisers.
   *   "inputs" (optional) declares what the model needs of its rows besides media and text:
   *   {"audio": {"sample_rate": int, "channels": 1 | 2}} makes the host hand every video row's
   *   sound (its "audio" file, else the video's sound track) to the training hooks as the float32
   *   tensor "audio" [B, channels, samples], cut to the time span of the row's sampled frames;
   *   {"tensors": {"<name>": {"shape": [per-row sizes, -1: any], "with_latents": bool}}} makes
   *   `data check` and the loader refuse a row whose cached tensor of that name has another
   *   shape (or, with with_latents, a cached-latents row without it), naming the row.
   * prepare gets, once the components exist (component_get answers from here on):
   *   {"lora": {"targets": [names or a preset such as "auto"], "r": int, "alpha": number,
   *   "dropout": number}, "tuning": "lora" | "full", "precision": "float32" | "bf16" | "fp16",
   *   "device": "cpu" | "cuda:N"}. Sampling and export open the pipeline without calling
   *   prepare when they need no trainable layout (sample), and with it when they do (export). */
  yeto_status (*load_pipeline)(void* instance, const char* model_dir, const char* model_index_json,
                               const yeto_text_out* plan_json, yeto_error* error);
  yeto_status (*prepare)(void* instance, const char* options_json, yeto_error* error);

  /* Registers the plugin's component classes (its denoiser, a family VAE, ...). */
  yeto_status (*register_components)(void* instance, const yeto_component_registry* registry, yeto_error* error);

  /* Trainable tensors under canonical, deterministic names, in canonical order
   * ("<component>.<parameter>", PEFT's "<component>.<layer>.lora_A.weight" for LoRA). The
   * learner keeps float32 master weights: every tensor returned must be float32. */
  yeto_status (*trainable_parameters)(void* instance, const yeto_named_tensors_out* out, yeto_error* error);

  /* The tensor contract of the training path (what the host's generic learner sends and expects):
   *
   * encode_media: media {"pixel_values": float32 in [-1, 1], [B, 3, H, W] for images or
   *   [B, 3, F, H, W] for video}; options_json {"sample": bool (false: the posterior mean),
   *   "seed": integer}. Must return "latents" [B, ...]; any other tensor is kept too (a cache
   *   stores every one per row). Every tensor batch-first; the learner casts latents to float32.
   * encode_conditioning: prompts_json a JSON array of B strings; extra: the rows' cached
   *   tensors other than "latents" (batch-first). Returns named conditioning tensors, batch-first
   *   (e.g. "prompt_embeds", "pooled_prompt_embeds"); a batch whose rows carry a cached
   *   "prompt_embeds" is not encoded: its cached tensors are the conditioning.
   * denoiser_kwargs: batch {"noisy" [B, ...] float32 (x_t, the latents' layout), "timesteps" [B]
   *   (the scheduler's training scale: float32 in [0, num_train_timesteps) for flow-match
   *   schedules, int64 for DDPM-family ones), "sigmas" [B] float32 (x_t = alpha_t x0 + sigma_t
   *   noise), then every conditioning tensor}, holding only the rows routed to this denoiser.
   *   Returns extra named inputs for denoise (ids, guidance, micro-conditions, masks).
   * denoise: inputs {"hidden_states" (the batch's "noisy"), "timesteps", every conditioning
   *   tensor, then what denoiser_kwargs returned}; "sigmas" is not passed. Returns the
   *   prediction with its autograd graph (the host backpropagates through it).
   * align: the prediction and the scheduler's float32 target (the latents' layout); returns
   *   both in one layout, batch-first. The host computes the per-row weighted mean squared
   *   error of the two and backpropagates.
   * step_json of the three denoiser hooks: {"denoiser": "<component name>", "training": true};
   *   at sampling a plugin drives its own loop in generate. */
  yeto_status (*encode_media)(void* instance, const yeto_named_tensors* media, const char* options_json,
                              const yeto_named_tensors_out* latents, yeto_error* error);
  yeto_status (*encode_conditioning)(void* instance, const char* prompts_json, const yeto_named_tensors* extra,
                                     const yeto_named_tensors_out* conditioning, yeto_error* error);

  /* Denoiser: family keyword contributions (position ids, guidance, packing), then the
   * forward itself; step_json as above. */
  yeto_status (*denoiser_kwargs)(void* instance, const yeto_named_tensors* batch, const char* step_json,
                                 const yeto_named_tensors_out* kwargs, yeto_error* error);
  yeto_status (*denoise)(void* instance, const yeto_named_tensors* inputs, const char* step_json,
                         yeto_tensor* prediction, yeto_error* error);

  /* Brings prediction and target to one layout (unpacking, learned-sigma split). */
  yeto_status (*align)(void* instance, yeto_tensor prediction, yeto_tensor target, const char* step_json,
                       yeto_tensor* aligned_prediction, yeto_tensor* aligned_target, yeto_error* error);

  /* The complete training loss of one batch (capability loss_step), for a model whose loss is
   * not the learner's diffusion loss. A plugin with loss_step needs no scheduler or denoiser
   * component: the learner calls no other training hook for it (trainable_parameters still
   * gives what it optimises), and still owns optimisation, accumulation, sync and checkpoints.
   * rows_json: a JSON array, one object per row: {"row": its index in the dataset, "prompt":
   * its caption or "", "seed": a 64-bit seed for the row's randomness (the same for the same
   * run seed, topology, step and position), "training": false at validation, which runs under
   * no-grad}. batch: "pixel_values" (float32 in [-1, 1], [B, 3, H, W] or [B, 3, F, H, W]) when
   * the rows carry media, "audio" (float32 [B, channels, samples]) when the plugin declares an
   * audio input, and every cached tensor of the rows by its name, batch-first.
   * *loss: a scalar floating-point tensor with its graph (the host backpropagates it);
   * metrics_json: a JSON object of numbers (may be "{}"), logged per step as "model/<name>". */
  yeto_status (*loss_step)(void* instance, const char* rows_json, const yeto_named_tensors* batch,
                           yeto_tensor* loss, const yeto_text_out* metrics_json, yeto_error* error);

  /* Artifacts (capability artifacts): the trained state in the plugin's own format, next to the
   * host's PEFT / Diffusers files, for what those cannot carry (trainables that are no LoRA of a
   * denoiser, a format the family's own tools read).
   * save_artifact: called by `yeto-host export` after the host wrote the adapter directory, on a
   *   prepared pipeline whose trainable tensors (trainable_parameters) hold the checkpoint's
   *   values; the frozen base is not loaded. dir: an empty directory that the host renames to
   *   <output>/plugin when the call succeeds (a failure leaves no partial folder). metadata_json:
   *   the adapter's record (yeto_diffusion_adapter.json: base model, plugin, lora, provenance).
   * load_artifact: called by `yeto-host sample --adapter-dir DIR` for a DIR/plugin folder, after
   *   the host folded DIR's LoRA weights into the base and before any generate; the pipeline is
   *   loaded and not prepared. Writes a JSON object describing what it restored (logged);
   *   a failure ends the command naming the folder. */
  yeto_status (*save_artifact)(void* instance, const char* dir, const char* metadata_json, yeto_error* error);
  yeto_status (*load_artifact)(void* instance, const char* dir, const yeto_text_out* metadata_json,
                               yeto_error* error);

  /* Generation/sampling (capability generate), on an unprepared pipeline. `yeto-host sample`
   * sends request_json {"prompts": [one string], "seed": uint64, "steps": int >= 1,
   * "guidance": number, "height": int, "width": int, and when the user gave them
   * "guidance_2": number (a second denoiser's), "max_sequence_length": int, "num_frames": int,
   * "fps": number, and "output_dir": a folder path (not created) where a plugin whose generation
   * makes files of its own, such as an external program's outputs and log, puts them} and no
   * input tensors; a plugin may accept more keys ("negative_prompts",
   * "output_type") for its own callers (check-parity sends the recorded pipeline call); keys a
   * family does not use are ignored, a bad value is refused naming its key. Outputs: "images" [B, 3, H, W] or "video"
   * [B, 3, F, H, W], float32 in [0, 1] on any device; or a 3-D family's "occupancy" [B, X, Y, Z]
   * with "occupancy_bounds" [lo, hi]; or a structure family's "structure_coordinates" float32
   * [S samples, N atoms, 3] (Å) with "structure_atom_name" uint8 [N, 4] (ASCII, NUL-padded),
   * "structure_element" int64 [N] (atomic number, 0 unknown), "structure_residue_name" uint8
   * [N, 3], "structure_residue_index" int64 [N] (1-based), "structure_chain_index" int64 [N]
   * (0-based: chains A..Z, AA, ...) and optionally "structure_is_hetero" uint8 [N], or
   * "structure_mmcif" uint8 [bytes] (an mmCIF file, read by the host's parser); "output_files"
   * int64 [1] counts the files left in output_dir. Other named tensors may follow (the host
   * ignores them). The same request and seed must give the same bytes. */
  yeto_status (*generate)(void* instance, const char* request_json, const yeto_named_tensors* inputs,
                          const yeto_named_tensors_out* outputs, yeto_error* error);

  /* ---- ABI 1.1 ---- */

  /* Documented model shapes for `yeto-host init-model`: a JSON object
   * {"<preset>": {"description": "...", "model_index": {...},
   *               "components": {"<name>": {"config": {...}}}}}.
   * The host writes model_index.json and each component's config, builds every component
   * from its class with random weights (seeded) and saves them in Diffusers layout;
   * tokenizer components are written by the host from their config. */
  yeto_status (*presets)(void* instance, const yeto_text_out* out, yeto_error* error);
} yeto_plugin_v1;

/* ---- the entry point -------------------------------------------------------------------- */

/* Called once, right after the library is opened. `host` lives for the process. On success
 * *plugin points at a table that lives for the process. The plugin keeps `host` to call
 * back; it must not start threads, open sockets or talk to other processes, except that a
 * family whose sampling is another program (AlphaFold 3's run_alphafold.py) runs it from
 * generate, waiting for it, through the family kit's run_process (yeto/family/process.hpp). */
typedef yeto_status (*yeto_plugin_entry_fn)(const yeto_host_api* host, const yeto_plugin_v1** plugin,
                                            yeto_error* error);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* YETO_PLUGIN_H */
