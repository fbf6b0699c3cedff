# yeto_add_plugin(): build, describe and sign a Yeto model-family plugin.
#
# Used the same way in the Yeto tree and by third parties through find_package(YetoSDK).
# Needs the targets YetoSDK::headers and YetoSDK::yeto-sign and YETO_SDK_INCLUDE_DIR.
#
#   yeto_add_plugin(<name>
#     SOURCES <files...>
#     [VERSION <version>]             default: PROJECT_VERSION, else 0.0.0
#     [FAMILIES <family...>]          model families served; default: <name>
#     [ALIASES <alias...>]            model aliases this plugin serves
#     [PIPELINES <class...>]          Diffusers pipeline classes (model_index.json "_class_name")
#                                     it serves; with ALIASES, how the host chooses a plugin signed
#                                     by its own key when the run names none
#     [CLASSES <class...>]            component classes register_components registers (a
#                                     component config's "_class_name"), for finding the plugin
#                                     of a recorded component case
#     [CAPABILITIES <cap...>]         pipeline components trainable encode_media encode_conditioning
#                                     denoiser align loss_step artifacts generate presets
#     [FAMILY_FILE <file>]            the family file (<name>.family.json, yeto/family/description.hpp):
#                                     FAMILIES, ALIASES, PIPELINES, CLASSES, CAPABILITIES,
#                                     LICENSE_NOTICE, LICENSE_MUST_ACKNOWLEDGE and DESCRIPTION not
#                                     given here are read from its keys families, aliases,
#                                     pipelines, classes, capabilities, license_notice,
#                                     license_must_acknowledge and description
#     [LINK <targets...>]             libraries the plugin links privately (its model code)
#     [LICENSE_NOTICE <text>] [LICENSE_MUST_ACKNOWLEDGE]
#     [DESCRIPTION <text>]
#     [KEY <secret key file>]         default: YETO_SIGNING_KEY, else a key generated in the build
#     [OUTPUT_DIRECTORY <dir>]        default: ${CMAKE_BINARY_DIR}/plugins
#     [NO_TORCH]                      the plugin does not link LibTorch (DLPack / host API only)
#     [UNSIGNED])                     skip signing (only for tests of the refusal path)
#
# yeto_embed_text(<target> <file> <symbol>) compiles <file>'s bytes into <target> as
#   extern const char <symbol>[];  (NUL-terminated)
# so a family reads its family file without finding it at run time; a changed file re-runs
# CMake and rebuilds. Declare the symbol yourself where you read it.
#
# yeto_family_description(<target> <file> <namespace>) compiles the family file <file> into
# <target> and defines
#   const yeto::family::FamilyDescription& <namespace>::description();
# (yeto/family/description.hpp: parsed once, errors naming the file). Declare it in your header.
#
# Produces, in OUTPUT_DIRECTORY: <name>.so (MODULE, hidden visibility, static libraries it links
# kept internal: only yeto_plugin_entry is exported), <name>.yeto.json (the
# manifest) and <name>.yeto.sig (the detached signature over both). Sources see a generated
# header <yeto_plugin_info.h> whose YETO_PLUGIN_INFO_* macros repeat the manifest, so the
# descriptor the plugin returns agrees with it by construction.
include_guard(GLOBAL)

if(NOT YETO_SDK_INCLUDE_DIR)
  message(FATAL_ERROR "YetoPlugin.cmake: YETO_SDK_INCLUDE_DIR is not set (use find_package(YetoSDK))")
endif()

# The ABI version of the headers this SDK ships, read from plugin.h.
file(STRINGS "${YETO_SDK_INCLUDE_DIR}/yeto/plugin.h" _yeto_abi_lines REGEX "^#define YETO_ABI_VERSION_M(AJOR|INOR) ")
foreach(_l IN LISTS _yeto_abi_lines)
  if(_l MATCHES "MAJOR ([0-9]+)u")
    set(YETO_SDK_ABI_MAJOR "${CMAKE_MATCH_1}")
  elseif(_l MATCHES "MINOR ([0-9]+)u")
    set(YETO_SDK_ABI_MINOR "${CMAKE_MATCH_1}")
  endif()
endforeach()
set(YETO_SDK_ABI_VERSION "${YETO_SDK_ABI_MAJOR}.${YETO_SDK_ABI_MINOR}")
# Functions run in their caller's scope: keep what they need in global properties.
set_property(GLOBAL PROPERTY YETO_SDK_ABI_VERSION "${YETO_SDK_ABI_VERSION}")

set(YETO_SIGNING_KEY "" CACHE FILEPATH "Secret key (yeto-ed25519-secret) that signs plugins; empty: a key generated in the build")

# Escapes text for both a JSON string and a C string literal.
function(_yeto_escape out text)
  string(REPLACE "\\" "\\\\" text "${text}")
  string(REPLACE "\"" "\\\"" text "${text}")
  string(REPLACE "\n" "\\n" text "${text}")
  string(REPLACE "\t" "\\t" text "${text}")
  string(REPLACE "\r" "" text "${text}")
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

function(_yeto_json_list out)
  set(items "")
  foreach(v IN LISTS ARGN)
    _yeto_escape(e "${v}")
    list(APPEND items "\"${e}\"")
  endforeach()
  list(JOIN items ", " joined)
  set(${out} "[${joined}]" PARENT_SCOPE)
endfunction()

function(_yeto_c_list out)
  set(items "")
  foreach(v IN LISTS ARGN)
    _yeto_escape(e "${v}")
    string(APPEND items "\"${e}\", ")
  endforeach()
  set(${out} "${items}" PARENT_SCOPE)
endfunction()

# The key a build signs with when none is given: generated once, kept in the build tree.
# YETO_PLUGIN_KEY_PREFIX and YETO_PLUGIN_PUBLIC_KEY_DIR (copy of the public half) may be set
# before the first yeto_add_plugin call.
function(_yeto_default_key out_secret)
  if(NOT YETO_PLUGIN_KEY_PREFIX)
    set(YETO_PLUGIN_KEY_PREFIX "${CMAKE_BINARY_DIR}/yeto-keys/yeto-build")
  endif()
  set(secret "${YETO_PLUGIN_KEY_PREFIX}.secret")
  set(public "${YETO_PLUGIN_KEY_PREFIX}.public")
  if(NOT TARGET yeto_plugin_key)
    get_filename_component(key_dir "${secret}" DIRECTORY)
    set(commands COMMAND ${CMAKE_COMMAND} -E make_directory "${key_dir}"
                 COMMAND "$<TARGET_FILE:YetoSDK::yeto-sign>" keygen --out "${YETO_PLUGIN_KEY_PREFIX}" --comment "yeto-build-key" --force)
    set(outputs "${secret}" "${public}")
    if(YETO_PLUGIN_PUBLIC_KEY_DIR)
      get_filename_component(pub_name "${public}" NAME)
      list(APPEND commands COMMAND ${CMAKE_COMMAND} -E make_directory "${YETO_PLUGIN_PUBLIC_KEY_DIR}"
                           COMMAND ${CMAKE_COMMAND} -E copy "${public}" "${YETO_PLUGIN_PUBLIC_KEY_DIR}/${pub_name}")
      list(APPEND outputs "${YETO_PLUGIN_PUBLIC_KEY_DIR}/${pub_name}")
    endif()
    # A fixed working directory: the command text must not depend on which directory's
    # yeto_add_plugin call defined it, or moving that call would rerun it and, with --force,
    # replace the key the already-built plugins are signed with.
    add_custom_command(OUTPUT ${outputs} ${commands} WORKING_DIRECTORY "${CMAKE_BINARY_DIR}"
                       COMMENT "Generating the build's plugin signing key ${public}" VERBATIM)
    add_custom_target(yeto_plugin_key DEPENDS ${outputs})
    if(YETO_SIGN_BUILD_TARGET)
      add_dependencies(yeto_plugin_key ${YETO_SIGN_BUILD_TARGET})
    endif()
    set_property(GLOBAL PROPERTY YETO_PLUGIN_KEY_FILE "${secret}")
  endif()
  get_property(file GLOBAL PROPERTY YETO_PLUGIN_KEY_FILE)
  set(${out_secret} "${file}" PARENT_SCOPE)
endfunction()

function(yeto_embed_text target file symbol)
  if(NOT symbol MATCHES "^[A-Za-z_][A-Za-z0-9_]*$")
    message(FATAL_ERROR "yeto_embed_text(${target}): '${symbol}' is not a C identifier")
  endif()
  get_filename_component(path "${file}" ABSOLUTE)
  if(NOT EXISTS "${path}")
    message(FATAL_ERROR "yeto_embed_text(${target}): ${path} does not exist")
  endif()
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${path}")
  file(READ "${path}" hex HEX)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  string(REGEX REPLACE "((0x[0-9a-f][0-9a-f],){24})" "\\1\n  " bytes "${bytes}")
  set(out "${CMAKE_CURRENT_BINARY_DIR}/${target}_embed/${symbol}.cpp")
  file(GENERATE OUTPUT "${out}" CONTENT
"// Generated by yeto_embed_text from ${path}. Do not edit.
extern const char ${symbol}[];
extern const char ${symbol}[] = {
  ${bytes}0x00};
")
  target_sources(${target} PRIVATE "${out}")
endfunction()

function(yeto_family_description target file namespace)
  get_filename_component(name "${file}" NAME)
  string(MAKE_C_IDENTIFIER "yeto_family_file_${target}" symbol)
  yeto_embed_text(${target} "${file}" ${symbol})
  set(out "${CMAKE_CURRENT_BINARY_DIR}/${target}_embed/${symbol}_description.cpp")
  file(GENERATE OUTPUT "${out}" CONTENT
"// Generated by yeto_family_description from ${file}. Do not edit.
#include <yeto/family/description.hpp>

extern const char ${symbol}[];

namespace ${namespace} {
const yeto::family::FamilyDescription& description() {
  static const auto d = yeto::family::FamilyDescription::parse(${symbol}, \"${name}\");
  return d;
}
}  // namespace ${namespace}
")
  target_sources(${target} PRIVATE "${out}")
endfunction()

# Reads list `key` of the family file's JSON into `out` (empty when absent).
function(_yeto_family_list out json file key)
  set(items "")
  string(JSON type ERROR_VARIABLE err TYPE "${json}" "${key}")
  if(NOT err)
    if(NOT type STREQUAL "ARRAY")
      message(FATAL_ERROR "${file}: '${key}' must be an array of strings")
    endif()
    string(JSON n LENGTH "${json}" "${key}")
    if(n GREATER 0)
      math(EXPR last "${n} - 1")
      foreach(i RANGE ${last})
        string(JSON v GET "${json}" "${key}" ${i})
        list(APPEND items "${v}")
      endforeach()
    endif()
  endif()
  set(${out} "${items}" PARENT_SCOPE)
endfunction()

function(yeto_add_plugin name)
  # PARSE_ARGV keeps semicolons inside a license notice or description.
  cmake_parse_arguments(PARSE_ARGV 1 P "LICENSE_MUST_ACKNOWLEDGE;NO_TORCH;UNSIGNED"
                        "VERSION;LICENSE_NOTICE;DESCRIPTION;KEY;OUTPUT_DIRECTORY;FAMILY_FILE"
                        "SOURCES;FAMILIES;ALIASES;PIPELINES;CLASSES;CAPABILITIES;LINK")
  if(P_FAMILY_FILE)
    get_filename_component(family_file "${P_FAMILY_FILE}" ABSOLUTE)
    if(NOT EXISTS "${family_file}")
      message(FATAL_ERROR "yeto_add_plugin(${name}): FAMILY_FILE ${family_file} does not exist")
    endif()
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${family_file}")
    file(READ "${family_file}" family_json)
    string(JSON family_plugin ERROR_VARIABLE err GET "${family_json}" plugin)
    if(err OR NOT family_plugin STREQUAL name)
      message(FATAL_ERROR "yeto_add_plugin(${name}): ${family_file}: 'plugin' must be \"${name}\"")
    endif()
    foreach(key IN ITEMS families aliases pipelines classes capabilities)
      string(TOUPPER "${key}" var)
      if(NOT P_${var})
        _yeto_family_list(P_${var} "${family_json}" "${family_file}" ${key})
      endif()
    endforeach()
    foreach(key IN ITEMS license_notice description)
      string(TOUPPER "${key}" var)
      string(JSON value ERROR_VARIABLE err GET "${family_json}" ${key})
      if(NOT P_${var} AND NOT err)
        set(P_${var} "${value}")
      endif()
    endforeach()
    string(JSON ack ERROR_VARIABLE err GET "${family_json}" license_must_acknowledge)
    if(NOT err AND ack)
      set(P_LICENSE_MUST_ACKNOWLEDGE TRUE)
    endif()
  endif()
  if(NOT P_SOURCES)
    message(FATAL_ERROR "yeto_add_plugin(${name}): SOURCES is required")
  endif()
  if(NOT name MATCHES "^[a-z0-9][a-z0-9._-]*$")
    message(FATAL_ERROR "yeto_add_plugin(${name}): a plugin name must match [a-z0-9][a-z0-9._-]*")
  endif()
  if(NOT P_VERSION)
    set(P_VERSION "${PROJECT_VERSION}")
  endif()
  if(NOT P_VERSION)
    set(P_VERSION "0.0.0")
  endif()
  if(NOT P_FAMILIES)
    set(P_FAMILIES "${name}")
  endif()
  if(NOT P_OUTPUT_DIRECTORY)
    set(P_OUTPUT_DIRECTORY "${CMAKE_BINARY_DIR}/plugins")
    if(YETO_PLUGIN_DEFAULT_OUTPUT_DIRECTORY)
      set(P_OUTPUT_DIRECTORY "${YETO_PLUGIN_DEFAULT_OUTPUT_DIRECTORY}")
    endif()
  endif()
  set(known_caps pipeline components trainable encode_media encode_conditioning denoiser align loss_step artifacts generate
                 presets)
  set(cap_expr "0ull")
  foreach(c IN LISTS P_CAPABILITIES)
    if(NOT c IN_LIST known_caps)
      message(FATAL_ERROR "yeto_add_plugin(${name}): unknown capability '${c}' (known: ${known_caps})")
    endif()
    string(TOUPPER "${c}" cu)
    string(APPEND cap_expr " | YETO_CAP_${cu}")
  endforeach()

  get_property(YETO_SDK_ABI_VERSION GLOBAL PROPERTY YETO_SDK_ABI_VERSION)
  set(torch_version "")
  if(NOT P_NO_TORCH)
    if(NOT TARGET torch)
      find_package(Torch REQUIRED)
    endif()
    set(torch_version "${Torch_VERSION}")
    if(NOT torch_version)
      message(FATAL_ERROR "yeto_add_plugin(${name}): LibTorch was found but reports no version (Torch_VERSION)")
    endif()
  endif()

  add_library(${name} MODULE ${P_SOURCES})
  set_target_properties(${name} PROPERTIES
    PREFIX "" OUTPUT_NAME "${name}" SUFFIX ".so"
    LIBRARY_OUTPUT_DIRECTORY "${P_OUTPUT_DIRECTORY}"
    C_VISIBILITY_PRESET hidden CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  target_link_libraries(${name} PRIVATE YetoSDK::headers)
  # --exclude-libs: the static libraries a plugin links (YetoSDK::nn, YetoSDK::family, its own
  # model code) stay internal, so the plugin exports yeto_plugin_entry and nothing of ours.
  target_link_options(${name} PRIVATE "LINKER:--no-undefined" "LINKER:--exclude-libs,ALL")
  if(COMMAND yeto_warnings)  # the Yeto tree's own warning set
    yeto_warnings(${name})
  endif()
  if(NOT P_NO_TORCH)
    target_link_libraries(${name} PRIVATE torch)
  endif()
  if(P_LINK)
    target_link_libraries(${name} PRIVATE ${P_LINK})
  endif()

  # The generated info header and the manifest.
  _yeto_escape(e_version "${P_VERSION}")
  _yeto_escape(e_notice "${P_LICENSE_NOTICE}")
  _yeto_escape(e_desc "${P_DESCRIPTION}")
  _yeto_c_list(c_families ${P_FAMILIES})
  _yeto_c_list(c_aliases ${P_ALIASES})
  set(ack 0)
  set(ack_json false)
  if(P_LICENSE_MUST_ACKNOWLEDGE)
    set(ack 1)
    set(ack_json true)
  endif()
  set(info_dir "${CMAKE_CURRENT_BINARY_DIR}/${name}_yeto_info")
  file(GENERATE OUTPUT "${info_dir}/yeto_plugin_info.h" CONTENT
"/* Generated by yeto_add_plugin(${name}); repeats the manifest. Do not edit. */
#ifndef YETO_PLUGIN_INFO_H
#define YETO_PLUGIN_INFO_H
#define YETO_PLUGIN_INFO_NAME \"${name}\"
#define YETO_PLUGIN_INFO_VERSION \"${e_version}\"
#define YETO_PLUGIN_INFO_FAMILIES ${c_families}
#define YETO_PLUGIN_INFO_ALIASES ${c_aliases}
#define YETO_PLUGIN_INFO_CAPABILITIES (${cap_expr})
#define YETO_PLUGIN_INFO_TORCH_VERSION \"${torch_version}\"
#define YETO_PLUGIN_INFO_LICENSE_NOTICE \"${e_notice}\"
#define YETO_PLUGIN_INFO_LICENSE_MUST_ACKNOWLEDGE ${ack}
#define YETO_PLUGIN_INFO_ABI \"${YETO_SDK_ABI_VERSION}\"
#endif
")
  target_include_directories(${name} PRIVATE "${info_dir}")

  _yeto_json_list(j_families ${P_FAMILIES})
  _yeto_json_list(j_aliases ${P_ALIASES})
  _yeto_json_list(j_caps ${P_CAPABILITIES})
  _yeto_json_list(j_pipelines ${P_PIPELINES})
  _yeto_json_list(j_classes ${P_CLASSES})
  set(manifest "${P_OUTPUT_DIRECTORY}/${name}.yeto.json")
  file(GENERATE OUTPUT "${manifest}" CONTENT
"{
  \"format\": \"yeto-plugin-manifest\",
  \"name\": \"${name}\",
  \"version\": \"${e_version}\",
  \"abi\": \"${YETO_SDK_ABI_VERSION}\",
  \"library\": \"${name}.so\",
  \"torch_version\": \"${torch_version}\",
  \"families\": ${j_families},
  \"aliases\": ${j_aliases},
  \"pipelines\": ${j_pipelines},
  \"classes\": ${j_classes},
  \"capabilities\": ${j_caps},
  \"license\": {\"notice\": \"${e_notice}\", \"must_acknowledge\": ${ack_json}},
  \"description\": \"${e_desc}\"
}
")
  set_property(TARGET ${name} PROPERTY YETO_PLUGIN_MANIFEST "${manifest}")
  # A changed manifest relinks (and so re-signs) the plugin.
  set_property(TARGET ${name} APPEND PROPERTY LINK_DEPENDS "${manifest}")
  if(YETO_SIGN_BUILD_TARGET)
    add_dependencies(${name} ${YETO_SIGN_BUILD_TARGET})
  endif()

  # Installed next to the host when the including project asks for it (the Yeto tree does).
  if(YETO_PLUGIN_INSTALL_DESTINATION)
    install(FILES "${P_OUTPUT_DIRECTORY}/${name}.so" "${manifest}" DESTINATION "${YETO_PLUGIN_INSTALL_DESTINATION}"
            COMPONENT plugins)
    if(NOT P_UNSIGNED)
      install(FILES "${P_OUTPUT_DIRECTORY}/${name}.yeto.sig" DESTINATION "${YETO_PLUGIN_INSTALL_DESTINATION}"
              COMPONENT plugins)
    endif()
  endif()

  if(NOT P_UNSIGNED)
    set(key "${P_KEY}")
    if(NOT key)
      set(key "${YETO_SIGNING_KEY}")
    endif()
    if(NOT key)
      _yeto_default_key(key)
      add_dependencies(${name} yeto_plugin_key)
    endif()
    add_custom_command(TARGET ${name} POST_BUILD
      COMMAND "$<TARGET_FILE:YetoSDK::yeto-sign>" sign --key "${key}" --manifest "${manifest}" --library "$<TARGET_FILE:${name}>"
      COMMENT "Signing plugin ${name}" VERBATIM)
  else()
    add_custom_command(TARGET ${name} POST_BUILD
      COMMAND ${CMAKE_COMMAND} -E rm -f "${P_OUTPUT_DIRECTORY}/${name}.yeto.sig" VERBATIM)
  endif()
endfunction()
