# The optional CUDA backend (src/tandem/kernels/cuda/).
#
# TANDEM_HAVE_CUDA is ON when a CUDA compiler was found (and TANDEM_WITH_CUDA is ON): then
# kernels/cuda/*.cu and *.cc are compiled into tandem_kernels, which defines TANDEM_HAVE_CUDA for
# everything that links it, and links the CUDA runtime and cuBLASLt. cuDNN's fused attention is
# compiled in when the cuDNN frontend headers are found (TANDEM_CUDNN_FRONTEND_DIR, by default
# .cache/cudnn-frontend/include, which scripts/fetch_cudnn_frontend.sh fills from the
# nvidia-cudnn-frontend wheel); libcudnn itself is opened at run time, so a binary built with it
# still starts where cuDNN is missing and then uses its own attention kernel.

set(TANDEM_HAVE_CUDA OFF)
set(TANDEM_HAVE_CUDNN_FRONTEND OFF)
if(TANDEM_WITH_CUDA)
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # Hopper with its own instructions (wgmma, TMA): the H100/H200 the backend is written for.
      set(CMAKE_CUDA_ARCHITECTURES 90a)
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(TANDEM_HAVE_CUDA ON)
  endif()
endif()

if(TANDEM_HAVE_CUDA)
  set(TANDEM_CUDNN_FRONTEND_DIR "${CMAKE_SOURCE_DIR}/.cache/cudnn-frontend/include" CACHE PATH
    "Folder holding cudnn_frontend.h (the nvidia-cudnn-frontend wheel's include/)")
  find_path(TANDEM_CUDNN_H cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  if(EXISTS "${TANDEM_CUDNN_FRONTEND_DIR}/cudnn_frontend.h" AND TANDEM_CUDNN_H)
    set(TANDEM_HAVE_CUDNN_FRONTEND ON)
  endif()
  message(STATUS "CUDA backend: on (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, architectures "
    "${CMAKE_CUDA_ARCHITECTURES}; cuDNN attention: ${TANDEM_HAVE_CUDNN_FRONTEND})")
else()
  message(STATUS "CUDA backend: off (no CUDA compiler found, or TANDEM_WITH_CUDA=OFF)")
endif()

# Adds the CUDA backend's sources to the kernels library (a no-op without CUDA).
function(tandem_add_cuda_backend target)
  if(NOT TANDEM_HAVE_CUDA)
    return()
  endif()
  set(dir ${CMAKE_SOURCE_DIR}/src/tandem/kernels/cuda)
  file(GLOB sources CONFIGURE_DEPENDS ${dir}/*.cu ${dir}/*.cc)
  if(NOT TANDEM_HAVE_CUDNN_FRONTEND)
    list(FILTER sources EXCLUDE REGEX ".*/attention_cudnn\\.cc$")
  endif()
  target_sources(${target} PRIVATE ${sources})
  target_compile_definitions(${target} PUBLIC TANDEM_HAVE_CUDA)
  target_include_directories(${target} PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  target_link_libraries(${target} PRIVATE CUDA::cudart CUDA::cublasLt ${CMAKE_DL_LIBS})
  # C++17 for nvcc (CUB's minimum); the .cu files include only kernels/cuda/launch.h of ours.
  # No fast math anywhere: exp, division and sqrt stay IEEE, as the CPU kernels' parity needs.
  set_property(TARGET ${target} PROPERTY CUDA_STANDARD 17)
  target_compile_options(${target} PRIVATE
    "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wno-unused-parameter;--expt-relaxed-constexpr>")
  if(TANDEM_HAVE_CUDNN_FRONTEND)
    target_compile_definitions(${target} PRIVATE TANDEM_HAVE_CUDNN_FRONTEND)
    set_property(SOURCE ${dir}/attention_cudnn.cc TARGET_DIRECTORY ${target} APPEND PROPERTY
      COMPILE_DEFINITIONS NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING)
    # The frontend's headers are third-party (their warnings are not ours) and heavy: this one
    # file of graph-building host code takes ~2 minutes of CPU at -O2 and half that at -O0, and
    # nothing in it is hot, so it is compiled without optimisation.
    set_property(SOURCE ${dir}/attention_cudnn.cc TARGET_DIRECTORY ${target} APPEND PROPERTY
      COMPILE_OPTIONS -isystem ${TANDEM_CUDNN_FRONTEND_DIR} -O0)
  endif()
endfunction()
