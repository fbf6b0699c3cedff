# find_package(YetoSDK [COMPONENTS headers nn family]): the Yeto plugin SDK.
#   YetoSDK::headers    the C ABI (yeto/plugin.h) and the header-only C++ conveniences (always)
#   YetoSDK::yeto-sign  the signing tool (always)
#   yeto_add_plugin()   builds, describes and signs a plugin (see YetoPlugin.cmake)
#   YetoSDK::nn         component `nn`: LibTorch building blocks (LoRA Linear, attention,
#                       embeddings, norms, activation checkpointing, weight loading)
#   YetoSDK::family     component `family`: the family kit (yeto/family/*.hpp), links YetoSDK::nn
# The components find LibTorch (find_package(Torch)) and nlohmann_json; both are static,
# position-independent libraries that yeto_add_plugin keeps internal to the plugin (only
# yeto_plugin_entry is exported). Without them, LibTorch is looked up by yeto_add_plugin unless
# a plugin says NO_TORCH.
include("${CMAKE_CURRENT_LIST_DIR}/YetoSDKTargets.cmake")
get_filename_component(_yeto_sdk_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
set(YETO_SDK_INCLUDE_DIR "${_yeto_sdk_prefix}/include")
set(YETO_SDK_PREFIX "${_yeto_sdk_prefix}")
set(YetoSDK_FOUND TRUE)
set(YetoSDK_headers_FOUND TRUE)

set(_yeto_sdk_kit FALSE)
foreach(_c IN LISTS YetoSDK_FIND_COMPONENTS)
  if(_c STREQUAL "nn" OR _c STREQUAL "family")
    set(_yeto_sdk_kit TRUE)
  elseif(NOT _c STREQUAL "headers")
    set(YetoSDK_FOUND FALSE)
    set(YetoSDK_NOT_FOUND_MESSAGE "YetoSDK has no component '${_c}' (components: headers nn family)")
    return()
  endif()
endforeach()
if(_yeto_sdk_kit)
  include(CMakeFindDependencyMacro)
  find_dependency(Torch)
  find_dependency(nlohmann_json)
  include("${CMAKE_CURRENT_LIST_DIR}/YetoSDKKitTargets.cmake")
  set(YetoSDK_nn_FOUND TRUE)
  set(YetoSDK_family_FOUND TRUE)
endif()

include("${CMAKE_CURRENT_LIST_DIR}/YetoPlugin.cmake")
