// yeto/plugin.h compiles as C++ (the C build is tests/plugin/plugins/c_plugin.c) and its
// structs start with the size and version fields the loader relies on.
#include "yeto/plugin.h"

#include <cstddef>

static_assert(offsetof(yeto_plugin_v1, struct_size) == 0 && offsetof(yeto_plugin_v1, abi_version) == 4);
static_assert(offsetof(yeto_plugin_descriptor, struct_size) == 0 && offsetof(yeto_plugin_descriptor, abi_version) == 4);
static_assert(offsetof(yeto_host_api, struct_size) == 0 && offsetof(yeto_host_api, abi_version) == 4);
static_assert(offsetof(yeto_component_v1, struct_size) == 0 && offsetof(yeto_component_v1, abi_version) == 4);
static_assert(YETO_ABI_MAJOR(YETO_ABI_VERSION) == YETO_ABI_VERSION_MAJOR);
static_assert(YETO_ABI_MINOR(YETO_MAKE_ABI_VERSION(3, 9)) == 9);
