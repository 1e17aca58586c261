// The CUDA emulator's cuda_runtime.h: the host API and the device built-ins that the translated
// .cu files use (threadIdx, __syncthreads, warp shuffles, rounding intrinsics, atomics).
#pragma once

#include <cuda_runtime_api.h>

#include "cuda_emulator_device.h"
