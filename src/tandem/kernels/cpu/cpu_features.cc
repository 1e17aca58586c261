#include "tandem/kernels/cpu/cpu_features.h"

#include <cpuid.h>

#include <fstream>
#include <regex>

namespace tandem::kernels::cpu {
namespace {

CpuFeatures detect() {
  CpuFeatures f;
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.avx512f = __builtin_cpu_supports("avx512f");
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  // CPUID leaf 7 sub-leaf 1: EAX bit 5 = AVX512_BF16; leaf 7 sub-leaf 0: EDX bit 22 = AMX-BF16.
  if (__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) f.avx512_bf16 = (eax >> 5) & 1;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) f.amx_bf16 = (edx >> 22) & 1;
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  double mhz = 0.0;
  while (std::getline(in, line)) {
    if (f.model_name.empty() && line.rfind("model name", 0) == 0) {
      f.model_name = line.substr(line.find(':') + 2);
    } else if (mhz == 0.0 && line.rfind("cpu MHz", 0) == 0) {
      mhz = std::stod(line.substr(line.find(':') + 1));
    }
  }
  std::smatch m;
  static const std::regex kClock(R"((\d+(?:\.\d+)?)\s*GHz)");
  if (std::regex_search(f.model_name, m, kClock))
    f.clock_ghz = std::stod(m[1].str());
  else
    f.clock_ghz = mhz / 1000.0;
  return f;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

std::string describe_cpu_features() {
  const CpuFeatures& f = cpu_features();
  std::string s = f.avx512f ? "AVX-512" : f.avx2 ? "AVX2" : "SSE";
  if (f.fma) s += "+FMA";
  if (f.avx512_bf16) s += ", avx512_bf16";
  if (f.amx_bf16) s += ", AMX-bf16";
  return s;
}

double fp32_flops_per_cycle_per_core() {
  const CpuFeatures& f = cpu_features();
  const double lanes = f.avx512f ? 16.0 : (f.avx2 ? 8.0 : 4.0);
  const double pipes = f.fma ? 2.0 : 1.0;
  return pipes * lanes * 2.0;  // an FMA is two FLOPs
}

}  // namespace tandem::kernels::cpu
