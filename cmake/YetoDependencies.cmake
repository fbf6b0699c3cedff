# Finds every third-party dependency once; targets below link the imported targets.
# All of them come from Debian packages (scripts/setup.sh installs them); a GPU build points
# CMAKE_PREFIX_PATH at a PyTorch installation's torch.utils.cmake_prefix_path instead.

find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)

find_package(Torch REQUIRED)
find_package(Boost 1.74 REQUIRED)
find_package(tomlplusplus REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
pkg_check_modules(SODIUM REQUIRED IMPORTED_TARGET libsodium)
pkg_check_modules(FFMPEG REQUIRED IMPORTED_TARGET libavformat libavcodec libswscale libswresample libavutil)
pkg_check_modules(STB REQUIRED IMPORTED_TARGET stb)
# SentencePiece must never be linked into a target that also links LibTorch (its bundled
# protobuf clashes with LibTorch's); it is only ever linked into an isolated shim library.
pkg_check_modules(SENTENCEPIECE IMPORTED_TARGET sentencepiece)
if(YETO_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()

# What this LibTorch can do. Everything version- or device-specific is decided here and in
# sdk/include/yeto/torch_compat.hpp, nowhere else.
set(YETO_TORCH_VERSION "${Torch_VERSION}")
if(NOT YETO_TORCH_VERSION)
  set(YETO_TORCH_VERSION "unknown")
endif()
set(YETO_HAVE_CUDA OFF)
if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES)
  set(YETO_HAVE_CUDA ON)
endif()
# c10d's NCCL backend (host/island): only a CUDA LibTorch built with it; Debian's CPU build ships
# the header but not the backend, so CUDA is required as well.
set(YETO_HAVE_C10D_NCCL OFF)
if(YETO_HAVE_CUDA)
  foreach(_dir IN LISTS TORCH_INCLUDE_DIRS)
    if(EXISTS "${_dir}/torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp")
      set(YETO_HAVE_C10D_NCCL ON)
    endif()
  endforeach()
endif()
message(STATUS "yeto: LibTorch ${YETO_TORCH_VERSION} (CUDA: ${YETO_HAVE_CUDA}, c10d NCCL: ${YETO_HAVE_C10D_NCCL})")

# One imported helper target carrying LibTorch plus the project's torch-wide definitions.
add_library(yeto_torch INTERFACE)
target_link_libraries(yeto_torch INTERFACE torch)
target_compile_definitions(yeto_torch INTERFACE
  YETO_TORCH_VERSION_STRING="${YETO_TORCH_VERSION}"
  $<$<BOOL:${YETO_HAVE_CUDA}>:YETO_HAVE_CUDA=1>)

# A precompiled <torch/torch.h> shared by every host and test target that includes LibTorch:
# it halves the compile time of each such translation unit. Targets opt in with
# yeto_link_torch(), which keeps their flags identical to the PCH's so the reuse is valid.
if(YETO_USE_PCH)
  add_library(yeto_torch_pch OBJECT "${CMAKE_CURRENT_LIST_DIR}/pch_anchor.cpp")
  target_link_libraries(yeto_torch_pch PUBLIC yeto_torch)
  target_precompile_headers(yeto_torch_pch PRIVATE <torch/torch.h>)
  # The PCH is only valid for consumers compiled with the same flags: the same warnings
  # (-Wpedantic changes predefined feature macros) and the same code model (-fPIC).
  yeto_warnings(yeto_torch_pch)
endif()

function(yeto_link_torch target)
  target_link_libraries(${target} PRIVATE yeto_torch)
  if(YETO_USE_PCH)
    target_precompile_headers(${target} REUSE_FROM yeto_torch_pch)
    get_target_property(_type ${target} TYPE)
    if(_type STREQUAL "EXECUTABLE")
      # Executables default to -fPIE; the shared PCH was built with -fPIC, which is also
      # valid code for a PIE executable, so compile them the same way.
      target_compile_options(${target} PRIVATE -fPIC)
    endif()
  endif()
endfunction()
