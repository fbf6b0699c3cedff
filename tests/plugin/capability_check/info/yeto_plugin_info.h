/* What yeto_add_plugin generates, for a plugin declaring trainable and loss_step. */
#ifndef YETO_PLUGIN_INFO_H
#define YETO_PLUGIN_INFO_H
#define YETO_PLUGIN_INFO_NAME "mismatch"
#define YETO_PLUGIN_INFO_VERSION "0.1.0"
#define YETO_PLUGIN_INFO_FAMILIES "mismatch",
#define YETO_PLUGIN_INFO_ALIASES
#define YETO_PLUGIN_INFO_CAPABILITIES (0ull | YETO_CAP_TRAINABLE | YETO_CAP_LOSS_STEP)
#define YETO_PLUGIN_INFO_TORCH_VERSION ""
#define YETO_PLUGIN_INFO_LICENSE_NOTICE ""
#define YETO_PLUGIN_INFO_LICENSE_MUST_ACKNOWLEDGE 0
#define YETO_PLUGIN_INFO_ABI "1.2"
#endif
