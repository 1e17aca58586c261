// Token files and their sidecars: the sidecar JSON (first part of the input, up to a NUL byte)
// parsed and checked, the token file (the rest) opened with the sidecar's dtype and read, and
// the two checked against each other as `data tokenize` does on a resume.
#include <cstring>

#include "fuzz_util.h"
#include "tandem/io/token_file.h"
#include "tandem/io/token_file_writer.h"
#include "tandem/io/token_sidecar.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tandem;
  using namespace tandem::io;
  const std::string_view all = fuzz::as_text(data, size);
  const std::size_t split = std::min(all.find('\0'), all.size());
  const std::string_view sidecar_text = all.substr(0, split);
  const std::string_view tokens = split < all.size() ? all.substr(split + 1) : std::string_view();
  const std::string token_path = fuzz::scratch_file("part-00000.npy", tokens);
  fuzz::scratch_file("part-00000.json", sidecar_text);
  fuzz::expect_clean([&] {
    TokenSidecar sidecar = parse_token_sidecar(sidecar_text, "part-00000.json");
    TokenFile file(token_path, sidecar.dtype);
    std::vector<std::int64_t> ids(std::min<std::uint64_t>(file.num_tokens(), 4096));
    file.read(0, ids.size(), ids.data());
    if (file.num_tokens() > 0) (void)file.token(file.num_tokens() - 1);
  });
  fuzz::expect_clean([&] { (void)verified_sidecar(token_path); });
  return 0;
}
