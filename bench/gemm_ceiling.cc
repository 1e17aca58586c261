// This machine's GEMM ceiling: fp32 through oneDNN's sgemm (what the CPU kernels call; the
// trainer's MFU denominator) and bf16 x bf16 -> fp32 through oneDNN's matmul primitive (the later
// mixed-precision path), on large square shapes and the shapes of the 50M benchmark model and of
// OLMo 3 7B. Prints GFLOP/s per shape; with --json, one JSON object.
//
// Usage: bench_gemm_ceiling [--threads 2] [--min-seconds 0.5] [--quick] [--json]
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tandem/io/safetensors.h"
#include "tandem/kernels/backend.h"
#include "tandem/train/mfu.h"

namespace {

struct Shape {
  const char* label;
  std::int64_t m, n, k;
};

// bf16 GFLOP/s, or nullopt with `why` set when oneDNN has no bf16 matmul for this CPU.
// Weights are given to oneDNN in its preferred (packed) layout once, outside the timing, as a
// trainer would keep them between steps of one optimizer update.
std::optional<double> measure_bf16_matmul_gflops(const Shape& s, double min_seconds,
                                                 std::string& why) {
  using dnnl::memory;
  try {
    dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    dnnl::stream stream(engine);
    memory::desc a_md({s.m, s.k}, memory::data_type::bf16, memory::format_tag::ab);
    memory::desc b_plain({s.k, s.n}, memory::data_type::bf16, memory::format_tag::ab);
    memory::desc b_any({s.k, s.n}, memory::data_type::bf16, memory::format_tag::any);
    memory::desc c_md({s.m, s.n}, memory::data_type::f32, memory::format_tag::ab);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_any, c_md), engine);
    why = pd.impl_info_str();

    std::vector<std::uint16_t> a(static_cast<std::size_t>(s.m * s.k),
                                 tandem::io::f32_to_bf16(0.5f));
    std::vector<std::uint16_t> b(static_cast<std::size_t>(s.k * s.n),
                                 tandem::io::f32_to_bf16(0.25f));
    memory a_mem(a_md, engine, a.data());
    memory b_user(b_plain, engine, b.data());
    memory b_mem(pd.weights_desc(), engine);
    dnnl::reorder(b_user, b_mem).execute(stream, b_user, b_mem);
    memory c_mem(c_md, engine);
    dnnl::matmul matmul(pd);
    auto once = [&] {
      matmul.execute(stream,
                     {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
      stream.wait();
    };
    once();  // warm-up (and JIT)
    std::int64_t reps = 0;
    auto t0 = std::chrono::steady_clock::now();
    double elapsed = 0;
    do {
      once();
      ++reps;
      elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } while (elapsed < min_seconds);
    return 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k) *
           static_cast<double>(reps) / elapsed / 1e9;
  } catch (const dnnl::error& e) {
    why = std::string("no bf16 matmul on this CPU (oneDNN: ") + e.what() + ")";
    return std::nullopt;
  }
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  double min_seconds = 0.5;
  bool quick = false;
  bool json_out = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) {
      threads = std::stoi(argv[++i]);
    } else if (a == "--min-seconds" && i + 1 < argc) {
      min_seconds = std::stod(argv[++i]);
    } else if (a == "--quick") {
      quick = true;
    } else if (a == "--json") {
      json_out = true;
    } else {
      std::fprintf(
          stderr, "usage: bench_gemm_ceiling [--threads N] [--min-seconds S] [--quick] [--json]\n");
      return 2;
    }
  }
  omp_set_num_threads(threads);

  std::vector<Shape> shapes = {
      {"square 1024", 1024, 1024, 1024},
      {"square 2048", 2048, 2048, 2048},
      {"50M qkv proj (2048 tok, d 256)", 2048, 768, 256},
      {"50M mlp up+gate (d 256, h 768)", 2048, 1536, 256},
      {"50M mlp down", 2048, 256, 768},
      {"50M lm_head chunk (512 tok)", 512, 100352, 256},
      {"7B attn proj (2048 tok, d 4096)", 2048, 4096, 4096},
      {"7B mlp up (512 tok, h 11008)", 512, 11008, 4096},
      {"7B mlp down (512 tok)", 512, 4096, 11008},
  };
  if (!quick) shapes.insert(shapes.begin() + 2, {"square 4096", 4096, 4096, 4096});
  if (quick) shapes.resize(3);

  std::unique_ptr<tandem::kernels::Backend> backend = tandem::kernels::make_backend("cpu");
  nlohmann::json results = nlohmann::json::array();
  double best_fp32 = 0, best_bf16 = 0;
  std::string bf16_impl;
  if (!json_out) {
    std::printf("threads=%d min_seconds=%.2f (oneDNN %d.%d.%d)\n", threads, min_seconds,
                dnnl_version()->major, dnnl_version()->minor, dnnl_version()->patch);
    std::printf("%-34s %6s %7s %6s %12s %12s\n", "shape", "M", "N", "K", "fp32 GF/s", "bf16 GF/s");
  }
  for (const Shape& s : shapes) {
    double fp32 = tandem::train::measure_gemm_flops(*backend, s.m, s.n, s.k, min_seconds) / 1e9;
    std::optional<double> bf16 = measure_bf16_matmul_gflops(s, min_seconds, bf16_impl);
    best_fp32 = std::max(best_fp32, fp32);
    if (bf16) best_bf16 = std::max(best_bf16, *bf16);
    results.push_back({{"shape", s.label},
                       {"m", s.m},
                       {"n", s.n},
                       {"k", s.k},
                       {"fp32_gflops", fp32},
                       {"bf16_gflops", bf16 ? nlohmann::json(*bf16) : nlohmann::json()}});
    if (!json_out) {
      std::string bf16_text = bf16 ? std::to_string(static_cast<long>(*bf16 + 0.5)) : "n/a";
      std::printf("%-34s %6ld %7ld %6ld %12.1f %12s\n", s.label, static_cast<long>(s.m),
                  static_cast<long>(s.n), static_cast<long>(s.k), fp32, bf16_text.c_str());
      std::fflush(stdout);
    }
  }
  if (json_out) {
    nlohmann::json out = {
        {"threads", threads},
        {"min_seconds", min_seconds},
        {"shapes", results},
        {"fp32_ceiling_gflops", best_fp32},
        {"bf16_ceiling_gflops", best_bf16 > 0 ? nlohmann::json(best_bf16) : nlohmann::json()},
        {"bf16_implementation", bf16_impl}};
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf(
        "fp32 ceiling %.1f GFLOP/s; bf16 %s (%s)\n", best_fp32,
        best_bf16 > 0 ? (std::to_string(static_cast<long>(best_bf16)) + " GFLOP/s").c_str() : "n/a",
        bf16_impl.c_str());
  }
  return 0;
}
