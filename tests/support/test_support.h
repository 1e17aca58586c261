// The one test-support header: fixture paths, temporary directories unique per process and test
// (tests run in parallel under `ctest -j`), small file helpers, a scoped environment variable,
// running the built `tandem` binary (or a shell line), reading run outputs, and a CPU backend.
// Header-only: each test folder is its own executable and includes it as
// "../support/test_support.h".
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "tandem/kernels/cpu/cpu_backend.h"
#include "tandem/optim/adamw.h"

namespace tandem::testing {

// The fixtures folder and the `tandem` binary are compiled in; the environment variables of the
// same names override them, for test programs that run on another machine than the one that built
// them (bench/gpu_check.sh carries its test binaries to a GPU machine).
inline std::string fixtures_dir() {
  const char* env = std::getenv("TANDEM_FIXTURES_DIR");
  return env && *env ? env : TANDEM_FIXTURES_DIR;
}
inline std::string tandem_binary() {
  const char* env = std::getenv("TANDEM_BINARY");
  return env && *env ? env : TANDEM_BINARY;
}

inline std::string fixture(const std::string& rel) { return fixtures_dir() + "/" + rel; }

// A value-parameterised test's name from its string parameter, for INSTANTIATE_TEST_SUITE_P:
// GoogleTest takes letters, digits and '_' only ("bf16/gqa" -> "bf16_gqa"). Named so, a test's
// CTest name is its GoogleTest name (NO_PRETTY_VALUES in tests/CMakeLists.txt) and holds no space,
// which CTest's cost file (tests/ctest_costs.txt) cannot store.
struct ParamName {
  template <class Info>
  std::string operator()(const Info& info) const {
    std::string name{info.param};
    for (char& c : name) {
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    }
    return name;
  }
};

// The folders temp_dir() made during the running test, removed when the test ends without a
// failure: a CTest run makes hundreds. A failed test's folders stay for a look, and
// TANDEM_KEEP_TEST_DIRS=1 keeps every one. (A folder made outside a test, e.g. at static
// initialisation, is not tracked and stays.)
class TempDirCleanup : public ::testing::EmptyTestEventListener {
 public:
  // The one listener, handed to gtest (which owns it) on first use.
  static TempDirCleanup& instance() {
    static TempDirCleanup* const listener = [] {
      auto* l = new TempDirCleanup;
      ::testing::UnitTest::GetInstance()->listeners().Append(l);
      return l;
    }();
    return *listener;
  }
  void track(const std::filesystem::path& dir) {
    std::lock_guard<std::mutex> lock(mutex_);
    dirs_.push_back(dir);
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    std::vector<std::filesystem::path> dirs;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      dirs.swap(dirs_);
    }
    const char* keep = std::getenv("TANDEM_KEEP_TEST_DIRS");
    if (info.result()->Failed() || (keep && std::string(keep) == "1")) return;
    std::error_code ignored;  // a folder already gone (or busy) is no reason to fail a test
    for (const auto& dir : dirs) std::filesystem::remove_all(dir, ignored);
  }

 private:
  std::mutex mutex_;
  std::vector<std::filesystem::path> dirs_;
};

// A fresh empty directory under the system temp dir, unique per name, process and running test;
// removed when the test passes (TempDirCleanup).
inline std::string temp_dir(const std::string& name) {
  std::string test = "none";
  if (const auto* info = ::testing::UnitTest::GetInstance()->current_test_info())
    test = std::string(info->test_suite_name()) + "." + info->name();
  for (char& c : test)
    if (c == '/') c = '_';
  auto dir = std::filesystem::temp_directory_path() /
             ("tandem_test_" + name + "_" + test + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  if (::testing::UnitTest::GetInstance()->current_test_info())
    TempDirCleanup::instance().track(dir);
  return dir.string();
}

inline void write_text(const std::string& path, const std::string& text) {
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  std::ofstream(path, std::ios::binary) << text;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

inline CommandResult run_shell(const std::string& cmd) {
  CommandResult r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) r.output += buf;
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

inline CommandResult run_tandem(const std::string& args) {
  return run_shell(tandem_binary() + " " + args);
}

// The parent of process `pid` (0 if it is gone), from /proc/PID/stat.
inline pid_t parent_pid(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  // pid (comm) state ppid ...: comm may hold spaces, so read after its closing parenthesis.
  const std::size_t close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(line.substr(close + 1));
  std::string state;
  pid_t ppid = 0;
  rest >> state >> ppid;
  return ppid;
}

// The pid of the process below `launcher` (its child, or a child's child: the ranks of an mpirun
// that a script started) whose environment says it is OpenMPI rank `rank`, or -1. Only the
// launcher's own descendants count, never another test's ranks.
inline pid_t rank_pid_below(pid_t launcher, int rank) {
  const std::string wanted = "OMPI_COMM_WORLD_RANK=" + std::to_string(rank);
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const auto pid = static_cast<pid_t>(std::stol(name));
    pid_t ancestor = parent_pid(pid);
    while (ancestor > 1 && ancestor != launcher) ancestor = parent_pid(ancestor);
    if (ancestor != launcher) continue;
    std::ifstream environ_file(e.path() / "environ");
    std::string var;
    while (std::getline(environ_file, var, '\0'))
      if (var == wanted) return pid;
  }
  return -1;
}

inline std::vector<nlohmann::json> read_metrics(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

// ||a - b|| / ||b|| over b.size() values, in double.
inline double relative_l2(const float* a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    norm += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(diff / norm);
}

// Distance in units in the last place between two floats of the same sign.
inline std::int64_t ulps(float a, float b) {
  std::int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  return std::abs(static_cast<std::int64_t>(ia) - ib);
}

// Sets (or with a null value unsets) an environment variable for one scope, then restores what was
// there (tandem reads some choices from the environment when an object is made: the communicator,
// the attention kernels).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);  // null: unset for the scope
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// One CPU backend for the whole test program.
inline kernels::Backend& cpu_backend() {
  static kernels::CpuBackend backend;
  return backend;
}

// The fp32 scalars of AdamW's update number `step` (1, 2, ...) as the optimiser forms them, for the
// kernel tests: lr 1e-3, betas (beta1, 0.95), eps 1e-8, weight decay 0.1 where `decay`.
inline kernels::AdamWScalars adamw_scalars(
    int step, bool decay,
    kernels::AdamWArithmetic arithmetic = kernels::AdamWArithmetic::torch_adamw,
    double beta1 = 0.9) {
  optim::ParamHyper h;
  h.beta1 = beta1;
  h.beta2 = 0.95;
  h.eps = 1e-8;
  h.weight_decay = 0.1;
  kernels::AdamWScalars s = optim::adamw_scalars(arithmetic, h, 1e-3, step);
  s.decay = decay;
  return s;
}

}  // namespace tandem::testing
