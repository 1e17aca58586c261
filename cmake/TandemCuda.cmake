# The optional CUDA backend (src/tandem/kernels/cuda/).
#
# TANDEM_HAVE_CUDA is ON when a CUDA compiler was found (and TANDEM_WITH_CUDA is ON): then
# kernels/cuda/*.cu and *.cc are compiled into tandem_kernels, which defines TANDEM_HAVE_CUDA for
# everything that links it, and links the CUDA runtime and cuBLASLt. cuDNN's fused attention is
# compiled in when the cuDNN frontend headers are found (TANDEM_CUDNN_FRONTEND_DIR, by default
# .cache/cudnn-frontend/include, which scripts/fetch_cudnn_frontend.sh fills from the
# nvidia-cudnn-frontend wheel); libcudnn itself is opened at run time, so a binary built with it
# still starts where cuDNN is missing and then uses its own attention kernel.

option(TANDEM_CUDA_EMULATOR "Where no CUDA compiler is used: build the CUDA backend for the CPU \
emulator of tests/cuda_emulator, so its tests run (its kernels' logic, not a GPU)" OFF)
set(TANDEM_HAVE_CUDA OFF)
set(TANDEM_EMULATED_CUDA OFF)
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
elseif(TANDEM_CUDA_EMULATOR)
  find_package(Python3 REQUIRED COMPONENTS Interpreter)
  set(TANDEM_EMULATED_CUDA ON)
  message(STATUS "CUDA backend: emulated on the CPU (tests/cuda_emulator; no GPU code is built)")
else()
  message(STATUS "CUDA backend: off (no CUDA compiler found, or TANDEM_WITH_CUDA=OFF)")
endif()

# The CUDA backend's own sources compiled for the CUDA emulator (tests/cuda_emulator): the .cu
# files rewritten by translate_cu.py (launches and dynamic shared memory; nothing else changes),
# the host .cc files as they are, against the emulator's CUDA, cuBLASLt and cuDNN frontend headers
# (attention_cudnn.cc included: its graphs run on the emulator's SDPA, tests/cuda_emulator/
# cudnn_frontend.cc).
function(tandem_add_emulated_cuda_backend target)
  set(dir ${CMAKE_SOURCE_DIR}/src/tandem/kernels/cuda)
  set(emu ${CMAKE_SOURCE_DIR}/tests/cuda_emulator)
  file(GLOB cu_sources CONFIGURE_DEPENDS ${dir}/*.cu)
  file(GLOB cc_sources CONFIGURE_DEPENDS ${dir}/*.cc)
  set(translated "")
  foreach(cu ${cu_sources})
    get_filename_component(stem ${cu} NAME_WE)
    set(out ${CMAKE_BINARY_DIR}/cuda_emulated/${stem}.cu.cc)
    add_custom_command(OUTPUT ${out}
      COMMAND Python3::Interpreter ${emu}/translate_cu.py ${cu} ${out}
      DEPENDS ${cu} ${emu}/translate_cu.py VERBATIM)
    list(APPEND translated ${out})
  endforeach()
  # nccl.cc: the emulator's NCCL over MPI, for dist/nccl_communicator.cc (CMakeLists.txt).
  add_library(tandem_cuda_emulator STATIC ${emu}/scheduler.cc ${emu}/runtime.cc ${emu}/streams.cc
    ${emu}/cublaslt.cc ${emu}/cudnn_frontend.cc ${emu}/nccl.cc)
  set_target_properties(tandem_cuda_emulator PROPERTIES UNITY_BUILD OFF)
  if(TANDEM_SANITIZE)
    # The sanitizers check tandem's kernels, not the emulator that runs them: uninstrumented and at
    # -O2 it halves the emulated tests' time under ASan (the multi-rank CUDA tests dominated CI's
    # sanitizer stage). Its fibers still tell ASan which stack is live and its device memory is
    # still poisoned past each allocation (TANDEM_EMULATOR_ASAN); the emulated cuBLASLt and NCCL
    # check every operand against its allocation themselves, and memcpy/memset stay intercepted.
    target_compile_options(tandem_cuda_emulator PRIVATE -O2 -fno-sanitize=all)
    target_compile_definitions(tandem_cuda_emulator PRIVATE TANDEM_EMULATOR_ASAN)
  endif()
  target_include_directories(tandem_cuda_emulator BEFORE PUBLIC ${emu}/include)
  target_link_libraries(tandem_cuda_emulator PUBLIC OpenMP::OpenMP_CXX PRIVATE MPI::MPI_C)
  target_sources(${target} PRIVATE ${translated} ${cc_sources})
  target_compile_definitions(${target} PUBLIC TANDEM_HAVE_CUDA)
  target_compile_definitions(${target} PRIVATE TANDEM_HAVE_CUDNN_FRONTEND TANDEM_EMULATED_CUDNN)
  target_link_libraries(${target} PRIVATE tandem_cuda_emulator)
  # Each kernel file has its own anonymous-namespace constants (kThreads, ...), and the emulator's
  # headers define CUDA's keywords as macros: these files are compiled one by one. The explicitly
  # rounded intrinsics (__fmaf_rn, __fadd_rn, ...) must stay single operations: no contraction.
  # nvcc's `#pragma unroll` means nothing to the host compiler: not worth a warning per loop.
  set_source_files_properties(${cc_sources} TARGET_DIRECTORY ${target} PROPERTIES
    SKIP_UNITY_BUILD_INCLUSION ON COMPILE_OPTIONS -ffp-contract=off)
  set_source_files_properties(${translated} TARGET_DIRECTORY ${target} PROPERTIES
    SKIP_UNITY_BUILD_INCLUSION ON COMPILE_OPTIONS "-ffp-contract=off;-Wno-unknown-pragmas")
endfunction()

# Adds the CUDA backend's sources to the kernels library (a no-op without CUDA).
function(tandem_add_cuda_backend target)
  if(TANDEM_EMULATED_CUDA)
    tandem_add_emulated_cuda_backend(${target})
    return()
  endif()
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
