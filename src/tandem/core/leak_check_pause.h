// Under LeakSanitizer (the sanitizer build, scripts/test_sanitized.sh): allocations made while a
// LeakCheckPause lives are not reported as leaks. For third-party initialisation that keeps
// memory until exit on purpose (MPI_Init), whose stacks LSan's fast unwinder cannot attribute.
// A no-op in other builds.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define TANDEM_HAS_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TANDEM_HAS_LSAN 1
#endif
#endif

#ifdef TANDEM_HAS_LSAN
#include <sanitizer/lsan_interface.h>
#endif

namespace tandem::core {

class LeakCheckPause {
 public:
#ifdef TANDEM_HAS_LSAN
  LeakCheckPause() { __lsan_disable(); }
  ~LeakCheckPause() { __lsan_enable(); }
#else
  LeakCheckPause() {}
#endif
  LeakCheckPause(const LeakCheckPause&) = delete;
  LeakCheckPause& operator=(const LeakCheckPause&) = delete;
};

}  // namespace tandem::core
