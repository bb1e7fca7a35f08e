# ICU for portable binaries (XINFER_STATIC_DEPS=ON): ICU::uc points at the static archives, so `xinfer` and
# everything that links the tokenizer need no libicuuc.so.72 / libicudata.so.72 on the machine that runs
# them (the GPU machine has only the NVIDIA driver and CUDA runtime; issue 19).
# Defined before src/xinfer/tokenizer runs find_package(ICU): FindICU keeps an existing ICU::uc target.
# libicuuc.a needs libicudata.a (the ~30 MB Unicode data, linked in as one symbol) and the C++ runtime,
# which -static-libstdc++ supplies; dlopen (CMAKE_DL_LIBS) is part of glibc's libc since 2.34.
if(XINFER_STATIC_DEPS)
  find_library(ICU_UC_STATIC_LIB NAMES libicuuc.a REQUIRED)
  find_library(ICU_DATA_STATIC_LIB NAMES libicudata.a REQUIRED)
  find_path(ICU_STATIC_INCLUDE_DIR unicode/utypes.h REQUIRED)
  add_library(ICU::uc UNKNOWN IMPORTED)
  set_target_properties(ICU::uc PROPERTIES
    IMPORTED_LOCATION ${ICU_UC_STATIC_LIB}
    IMPORTED_LINK_INTERFACE_LANGUAGES CXX
    INTERFACE_INCLUDE_DIRECTORIES ${ICU_STATIC_INCLUDE_DIR}
    INTERFACE_LINK_LIBRARIES "${ICU_DATA_STATIC_LIB};${CMAKE_DL_LIBS}")
endif()
