# find_package(YetoSDK): the Yeto plugin SDK.
#   YetoSDK::headers    the C ABI (yeto/plugin.h) and the header-only C++ conveniences
#   YetoSDK::yeto-sign  the signing tool
#   yeto_add_plugin()   builds, describes and signs a plugin (see YetoPlugin.cmake)
# LibTorch is looked up by yeto_add_plugin (find_package(Torch)) unless a plugin says NO_TORCH.
include("${CMAKE_CURRENT_LIST_DIR}/YetoSDKTargets.cmake")
get_filename_component(_yeto_sdk_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
set(YETO_SDK_INCLUDE_DIR "${_yeto_sdk_prefix}/include")
set(YETO_SDK_PREFIX "${_yeto_sdk_prefix}")
include("${CMAKE_CURRENT_LIST_DIR}/YetoPlugin.cmake")
set(YetoSDK_FOUND TRUE)
