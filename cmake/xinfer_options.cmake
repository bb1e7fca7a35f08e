# Compiler warnings for all xinfer targets: xinfer_add_library(name SOURCES ... DEPS ...) and
# xinfer_target_warnings(target) give every target the same flags.
set(XINFER_CXX_WARNINGS -Wall -Wextra -Wpedantic -Wshadow=local -Wno-unused-parameter)
if(XINFER_WERROR)
  list(APPEND XINFER_CXX_WARNINGS -Werror)
endif()

function(xinfer_target_warnings target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${XINFER_CXX_WARNINGS}>)
endfunction()

# One library per folder under src/xinfer. DEPS lists the lower layers it may use (ARCHITECTURE.md).
function(xinfer_add_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  xinfer_target_warnings(${name})
endfunction()
