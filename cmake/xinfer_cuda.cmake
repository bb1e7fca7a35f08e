# CUDA detection. Hopper only (sm_90a): the arch-specific target enables wgmma and TMA.
# CMake 3.25 does not know the "90a" architecture name, so the flags are passed explicitly.
set(XINFER_HAVE_CUDA OFF)
if(NOT XINFER_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(CMAKE_CUDA_ARCHITECTURES OFF)
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(XINFER_HAVE_CUDA ON)
    # CMake 3.25 knows no CUDA20 dialect for nvcc: declare 17 for CMake and pass -std=c++20 ourselves.
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA17_STANDARD_COMPILE_OPTION "")
    set(CMAKE_CUDA17_EXTENSION_COMPILE_OPTION "")
    set(XINFER_CUDA_FLAGS -std=c++20 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -lineinfo
        -Xcompiler=-Wall)
    message(STATUS "xinfer: CUDA backend ON (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, sm_90a)")
  elseif(XINFER_CUDA STREQUAL "ON")
    message(FATAL_ERROR "XINFER_CUDA=ON but no CUDA compiler was found")
  else()
    message(STATUS "xinfer: CUDA backend OFF (nvcc not found)")
  endif()
endif()
