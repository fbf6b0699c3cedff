/* The Yeto C example plugin: the C ABI of yeto/plugin.h with nothing else.
 *
 * A plugin is one exported function, yeto_plugin_entry, that fills a descriptor (who it is:
 * name, version, families, capabilities -- all from the generated yeto_plugin_info.h, so they
 * agree with the signed manifest) and a hook table (what it does). Hooks it does not implement
 * stay NULL and are refused by the host; every hook returns a status and, on failure, a message
 * written into the caller's yeto_error.
 *
 * This one implements create / destroy and trainable_parameters: one float32 tensor
 * "example.weight" [4], made by the host (tensor_from_data) and initialised from the host's
 * deterministic random stream "example_init" (the same run seed gives the same values on every
 * rank), uniform in [-alpha/16, alpha/16) for the run's lora.alpha (read with config_get, to
 * show how a C plugin reads its run configuration). Families with models
 * are written in C++ on the family kit (see ../template); a C plugin suits thin adapters that
 * drive host components through component_get. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "yeto/plugin.h"
#include "yeto_plugin_info.h"

static const yeto_host_api* g_host = NULL;

/* Writes `msg` into the caller's error buffer (truncated to its capacity, always terminated). */
static void set_error(yeto_error* e, const char* msg) {
  size_t n = strlen(msg);
  if (!e) return;
  e->length = n;
  if (!e->message || e->capacity == 0) return;
  if (n > e->capacity - 1) n = e->capacity - 1;
  memcpy(e->message, msg, n);
  e->message[n] = '\0';
}

/* The instance: what create read from the run configuration. */
typedef struct {
  double scale;
} example_instance;

/* yeto_text_out sink for config_get: the JSON text of one value, into a small buffer. */
typedef struct {
  char text[64];
  size_t length;
} text_buffer;

static void text_write(void* context, const char* data, size_t size) {
  text_buffer* b = (text_buffer*)context;
  size_t room = sizeof b->text - 1 - b->length;
  if (size > room) size = room;
  memcpy(b->text + b->length, data, size);
  b->length += size;
  b->text[b->length] = '\0';
}

static yeto_status example_create(const char* config_json, void** instance, yeto_error* error) {
  example_instance* self = (example_instance*)calloc(1, sizeof *self);
  text_buffer alpha;
  yeto_text_out out;
  (void)config_json; /* the whole run configuration; config_get reads one key of it */
  if (!self) {
    set_error(error, "cexample: out of memory");
    return YETO_ERR_INTERNAL;
  }
  self->scale = 1.0;
  memset(&alpha, 0, sizeof alpha);
  memset(&out, 0, sizeof out);
  out.struct_size = (uint32_t)sizeof out;
  out.abi_version = YETO_ABI_VERSION;
  out.context = &alpha;
  out.write = text_write;
  if (g_host->config_get(g_host->host, "lora.alpha", &out, error) == YETO_OK && alpha.length > 0)
    self->scale = atof(alpha.text) / 16.0;
  *instance = self;
  return YETO_OK;
}

static void example_destroy(void* instance) { free(instance); }

static yeto_status example_trainable(void* instance, const yeto_named_tensors_out* out, yeto_error* error) {
  const example_instance* self = (const example_instance*)instance;
  const int64_t shape[1] = {4};
  float data[4];
  yeto_rng rng = NULL;
  yeto_tensor t = NULL;
  yeto_status s;
  int i;
  s = g_host->rng_create(g_host->host, "example_init", &rng, error);
  if (s != YETO_OK) return s;
  for (i = 0; i < 4; ++i) {
    /* 53 random bits -> [0, 1) -> [-scale, scale) */
    const double u = (double)(g_host->rng_next_u64(g_host->host, rng) >> 11) / 9007199254740992.0;
    data[i] = (float)((2.0 * u - 1.0) * self->scale);
  }
  g_host->rng_release(g_host->host, rng);
  s = g_host->tensor_from_data(g_host->host, YETO_DTYPE_F32, 1, shape, data, sizeof data, &t, error);
  if (s != YETO_OK) return s;
  return out->push(out->context, "example.weight", t); /* the host takes the reference */
}

static const char* const g_families[] = {YETO_PLUGIN_INFO_FAMILIES NULL};
static const char* const g_aliases[] = {YETO_PLUGIN_INFO_ALIASES NULL};
static yeto_plugin_descriptor g_descriptor;
static yeto_plugin_v1 g_plugin;

YETO_PLUGIN_EXPORT yeto_status yeto_plugin_entry(const yeto_host_api* host, const yeto_plugin_v1** plugin,
                                                 yeto_error* error) {
  if (!host || YETO_ABI_MAJOR(host->abi_version) != YETO_ABI_VERSION_MAJOR) {
    set_error(error, "cexample: the host speaks another ABI major version than this plugin was built for");
    return YETO_ERR_UNSUPPORTED;
  }
  if (!YETO_HAS_FIELD(yeto_host_api, host, rng_release) || !host->config_get || !host->tensor_from_data) {
    set_error(error, "cexample: the host lacks config_get, tensor_from_data or the rng functions");
    return YETO_ERR_UNSUPPORTED;
  }
  g_host = host;
  memset(&g_descriptor, 0, sizeof g_descriptor);
  g_descriptor.struct_size = (uint32_t)sizeof g_descriptor;
  g_descriptor.abi_version = YETO_ABI_VERSION;
  g_descriptor.name = YETO_PLUGIN_INFO_NAME;
  g_descriptor.version = YETO_PLUGIN_INFO_VERSION;
  g_descriptor.families = g_families;
  g_descriptor.aliases = g_aliases;
  g_descriptor.capabilities = YETO_PLUGIN_INFO_CAPABILITIES;
  g_descriptor.torch_version = YETO_PLUGIN_INFO_TORCH_VERSION;
  g_descriptor.license_notice = YETO_PLUGIN_INFO_LICENSE_NOTICE;
  g_descriptor.license_must_acknowledge = YETO_PLUGIN_INFO_LICENSE_MUST_ACKNOWLEDGE;
  memset(&g_plugin, 0, sizeof g_plugin);
  g_plugin.struct_size = (uint32_t)sizeof g_plugin;
  g_plugin.abi_version = YETO_ABI_VERSION;
  g_plugin.descriptor = &g_descriptor;
  g_plugin.create = example_create;
  g_plugin.destroy = example_destroy;
  g_plugin.trainable_parameters = example_trainable;
  *plugin = &g_plugin;
  return YETO_OK;
}
