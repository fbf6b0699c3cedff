/* A plugin written in plain C11 against yeto/plugin.h alone (no LibTorch): it proves the
 * header compiles as C, and its variants exercise the loader's checks.
 *   TEST_ABI_MAJOR=N     its tables claim ABI major N
 *   TEST_FUTURE          its tables are larger than ABI 1.0's (a newer minor version)
 *   TEST_NO_ENTRY        it exports no entry point
 *   TEST_VERSION="x"     its descriptor claims another version than its manifest
 *   TEST_SMALL           its hook table is smaller than ABI 1.0's
 *   TEST_V10             it was built against ABI 1.0 (table ends before `presets`)
 *   TEST_PRESETS         built against ABI 1.1: a presets hook, and its trainable parameters
 *                        are those of the pipeline component "weights"
 *                        (yeto_host_api.component_get, the 1.1 way to reach components)
 * Every variant's constructor appends a line to $YETO_TEST_MARKER when that is set, so a
 * test can tell whether the library was ever opened. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "yeto/plugin.h"
#include "yeto_plugin_info.h"

#ifndef TEST_ABI_MAJOR
#define TEST_ABI_MAJOR YETO_ABI_VERSION_MAJOR
#endif
#ifdef TEST_FUTURE
#define TEST_ABI YETO_MAKE_ABI_VERSION(TEST_ABI_MAJOR, 7)
#elif defined(TEST_V10)
#define TEST_ABI YETO_MAKE_ABI_VERSION(TEST_ABI_MAJOR, 0)
#elif defined(TEST_PRESETS)
#define TEST_ABI YETO_MAKE_ABI_VERSION(TEST_ABI_MAJOR, 1)
#else
#define TEST_ABI YETO_MAKE_ABI_VERSION(TEST_ABI_MAJOR, YETO_ABI_VERSION_MINOR)
#endif
#ifndef TEST_VERSION
#define TEST_VERSION YETO_PLUGIN_INFO_VERSION
#endif

__attribute__((constructor)) static void mark_loaded(void) {
  const char* path = getenv("YETO_TEST_MARKER");
  if (!path) return;
  FILE* f = fopen(path, "a");
  if (!f) return;
  fputs(YETO_PLUGIN_INFO_NAME " constructor ran\n", f);
  fclose(f);
}

static const yeto_host_api* g_host = NULL;

static void set_error(yeto_error* e, const char* msg) {
  size_t n = strlen(msg);
  if (!e) return;
  e->length = n;
  if (!e->message || e->capacity == 0) return;
  if (n > e->capacity - 1) n = e->capacity - 1;
  memcpy(e->message, msg, n);
  e->message[n] = '\0';
}

static int g_instance_tag = 0;

static yeto_status c_create(const char* config_json, void** instance, yeto_error* error) {
  (void)config_json;
  (void)error;
  *instance = &g_instance_tag;
  return YETO_OK;
}

static void c_destroy(void* instance) { (void)instance; }

#ifdef TEST_PRESETS
/* The parameters of the host pipeline's component "weights", passed straight through. */
static yeto_status c_trainable(void* instance, const yeto_named_tensors_out* out, yeto_error* error) {
  const yeto_component_v1* c = NULL;
  yeto_status s;
  (void)instance;
  if (!g_host || !YETO_HAS_FIELD(yeto_host_api, g_host, component_get) || !g_host->component_get) {
    set_error(error, "the host offers no component_get");
    return YETO_ERR_UNSUPPORTED;
  }
  s = g_host->component_get(g_host->host, "weights", &c, error);
  if (s != YETO_OK) return s;
  return c->parameters(c->self, out, error);
}

static yeto_status c_presets(void* instance, const yeto_text_out* out, yeto_error* error) {
  static const char text[] = "{\"tiny\": {\"description\": \"a C preset\", \"model_index\": {}, \"components\": {}}}";
  (void)instance;
  (void)error;
  out->write(out->context, text, sizeof text - 1);
  return YETO_OK;
}
#else
/* One trainable tensor made through the host API: "c.weight" = [1, 2, 3]. */
static yeto_status c_trainable(void* instance, const yeto_named_tensors_out* out, yeto_error* error) {
  static const float data[3] = {1.0f, 2.0f, 3.0f};
  const int64_t shape[1] = {3};
  yeto_tensor t = NULL;
  yeto_status s;
  (void)instance;
  if (!g_host || !YETO_HAS_FIELD(yeto_host_api, g_host, tensor_from_data) || !g_host->tensor_from_data) {
    set_error(error, "the host offers no tensor_from_data");
    return YETO_ERR_UNSUPPORTED;
  }
  s = g_host->tensor_from_data(g_host->host, YETO_DTYPE_F32, 1, shape, data, sizeof data, &t, error);
  if (s != YETO_OK) return s;
  return out->push(out->context, "c.weight", t);
}
#endif

static const char* const g_families[] = {YETO_PLUGIN_INFO_FAMILIES NULL};
static const char* const g_aliases[] = {YETO_PLUGIN_INFO_ALIASES NULL};

#ifdef TEST_FUTURE
/* What a plugin built against a future ABI 1.7 looks like: the same structs with fields
 * appended. The host must read only what it knows and ignore the rest. */
typedef struct {
  yeto_plugin_descriptor base;
  const char* homepage;
  uint64_t future_flags;
} future_descriptor;
typedef struct {
  yeto_plugin_v1 base;
  yeto_status (*future_hook)(void* instance, yeto_error* error);
  uint64_t future_reserved[4];
} future_plugin;
static future_descriptor g_descriptor;
static future_plugin g_plugin;
#define DESC (g_descriptor.base)
#define PLUG (g_plugin.base)
#else
static yeto_plugin_descriptor g_descriptor;
static yeto_plugin_v1 g_plugin;
#define DESC g_descriptor
#define PLUG g_plugin
#endif

static yeto_status entry_impl(const yeto_host_api* host, const yeto_plugin_v1** plugin, yeto_error* error) {
  if (!host || YETO_ABI_MAJOR(host->abi_version) != YETO_ABI_VERSION_MAJOR) {
    set_error(error, "host ABI major mismatch");
    return YETO_ERR_UNSUPPORTED;
  }
  g_host = host;
  memset(&g_descriptor, 0, sizeof g_descriptor);
  memset(&g_plugin, 0, sizeof g_plugin);
  DESC.struct_size = (uint32_t)sizeof g_descriptor;
  DESC.abi_version = TEST_ABI;
  DESC.name = YETO_PLUGIN_INFO_NAME;
  DESC.version = TEST_VERSION;
  DESC.families = g_families;
  DESC.aliases = g_aliases;
  DESC.capabilities = YETO_PLUGIN_INFO_CAPABILITIES;
  DESC.torch_version = YETO_PLUGIN_INFO_TORCH_VERSION;
  DESC.license_notice = YETO_PLUGIN_INFO_LICENSE_NOTICE;
  DESC.license_must_acknowledge = YETO_PLUGIN_INFO_LICENSE_MUST_ACKNOWLEDGE;
#ifdef TEST_FUTURE
  g_descriptor.homepage = "https://example.invalid/future";
  g_descriptor.future_flags = ~(uint64_t)0;
  g_plugin.future_hook = NULL;
#endif
#ifdef TEST_SMALL
  PLUG.struct_size = (uint32_t)offsetof(yeto_plugin_v1, generate);
#elif defined(TEST_V10)
  PLUG.struct_size = (uint32_t)offsetof(yeto_plugin_v1, presets);
#else
  PLUG.struct_size = (uint32_t)sizeof g_plugin;
#endif
  PLUG.abi_version = TEST_ABI;
  PLUG.descriptor = &DESC;
  PLUG.create = c_create;
  PLUG.destroy = c_destroy;
  PLUG.trainable_parameters = c_trainable;
#ifdef TEST_PRESETS
  PLUG.presets = c_presets;
#endif
  *plugin = &PLUG;
  return YETO_OK;
}

#ifndef TEST_NO_ENTRY
YETO_PLUGIN_EXPORT yeto_status yeto_plugin_entry(const yeto_host_api* host, const yeto_plugin_v1** plugin,
                                                 yeto_error* error) {
  return entry_impl(host, plugin, error);
}
#else
/* The same code exported under another name: not an entry point. */
YETO_PLUGIN_EXPORT yeto_status yeto_not_an_entry(const yeto_host_api* host, const yeto_plugin_v1** plugin,
                                                 yeto_error* error) {
  return entry_impl(host, plugin, error);
}
#endif
