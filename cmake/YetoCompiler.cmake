# Compiler settings shared by every target of the project.

# ccache when present: a warm rebuild after `rm -rf build` is then a few seconds.
find_program(YETO_CCACHE ccache)
if(YETO_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  set(CMAKE_C_COMPILER_LAUNCHER "${YETO_CCACHE}")
  set(CMAKE_CXX_COMPILER_LAUNCHER "${YETO_CCACHE}")
  message(STATUS "yeto: using ccache at ${YETO_CCACHE}")
endif()

# Warnings for the project's own code. Torch and Boost headers are system headers, so they
# do not trip these. -Wno-restrict: GCC 12 reports false -Wrestrict overlaps inside
# libstdc++ for `"literal" + std::string` (GCC bug 105329).
function(yeto_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow=local -Wnon-virtual-dtor
                               -Wno-restrict>
    $<$<COMPILE_LANGUAGE:C>:-Wall -Wextra -Wpedantic>)
  if(YETO_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()

if(YETO_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()

# Boost.Asio 1.74 coroutines use std::exchange without including <utility>.
add_compile_definitions(BOOST_DLL_USE_STD_FS BOOST_ASIO_NO_DEPRECATED)
