// What this CPU can do, detected at run time (the binary may run on another CPU than the one it
// was built on): vector width, FMA, native bf16 instructions. Used to choose kernel paths, to say
// in logs which path runs, and to state the hardware's peak for MFU.
#pragma once

#include <string>

namespace tandem::kernels::cpu {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool avx512f = false;
  bool avx512_bf16 = false;  // vdpbf16ps: bf16 dot products with fp32 accumulation
  bool amx_bf16 = false;     // AMX tiles with bf16 operands
  std::string model_name;    // from /proc/cpuinfo
  double clock_ghz = 0.0;    // nominal clock (model name "@ x.xxGHz", else cpu MHz); 0 if unknown
};

const CpuFeatures& cpu_features();
// "AVX-512 (bf16, AMX-bf16), FMA" style summary.
std::string describe_cpu_features();
// Peak fp32 FLOPs per cycle of one core: 2 FMA pipes x vector lanes x 2 (the common figure for
// AVX2 and AVX-512 server cores; a core with one AVX-512 FMA unit peaks at half).
double fp32_flops_per_cycle_per_core();

}  // namespace tandem::kernels::cpu
