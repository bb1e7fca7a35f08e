# XINFER_FUZZ=ON (scripts/fuzz.sh): every target of this build directory under AddressSanitizer and
# UndefinedBehaviorSanitizer, instrumented for libFuzzer (clang only). Included before src/xinfer, so the
# libraries the fuzz targets link are instrumented too. Warnings stay on but are not errors here (clang
# warns about things GCC, the compiler of the regular build, does not).
if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "XINFER_FUZZ needs clang (libFuzzer): configure with CC=clang-14 CXX=clang++-14")
endif()
set(XINFER_CUDA OFF CACHE STRING "" FORCE)
set(XINFER_CXX_WARNINGS -Wall -Wextra -Wno-unused-parameter)
add_compile_options(-fsanitize=address,undefined -fsanitize=fuzzer-no-link -fno-sanitize-recover=undefined
                    -fno-omit-frame-pointer -g)
add_link_options(-fsanitize=address,undefined)
