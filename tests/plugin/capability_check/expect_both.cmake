# cmake -DCOMPILER=... -DSOURCE=... -DINCLUDES="a|b" -P expect_both.cmake: compiles SOURCE
# (syntax only) and passes when the compiler refuses it with both CapabilityCheck messages.
set(args -std=c++17 -fsyntax-only)
string(REPLACE "|" ";" INCLUDES "${INCLUDES}")
foreach(dir IN LISTS INCLUDES)
  list(APPEND args "-I${dir}")
endforeach()
execute_process(COMMAND "${COMPILER}" ${args} "${SOURCE}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(rc EQUAL 0)
  message(FATAL_ERROR "a plugin whose class disagrees with its capabilities compiled")
endif()
foreach(expected
    "capability 'loss_step' is declared (CAPABILITIES or the family file's capabilities) but the plugin class does not override loss_step()"
    "the plugin class overrides generate() but capability 'generate' is not declared")
  string(FIND "${out}" "${expected}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "the compiler did not say: ${expected}\n--- its output ---\n${out}")
  endif()
endforeach()
message(STATUS "refused at compile time with both messages")
