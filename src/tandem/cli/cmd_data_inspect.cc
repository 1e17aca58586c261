// `tandem data inspect FILE [--tokenizer T]`: token count, dtype, documents, a decoded sample.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "tandem/cli/commands.h"
#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"
#include "tandem/io/token_file.h"
#include "tandem/io/token_file_writer.h"
#include "tandem/io/token_sidecar.h"
#include "tandem/tokenizer/tokenizer.h"

namespace tandem::cli {

namespace {

struct InspectArgs {
  std::string file;
  std::string tokenizer;
  std::string dtype;
  std::int64_t eos_id = -1;
  std::uint64_t sample_tokens = 64;
  bool json = false;
};

nlohmann::json inspect(const InspectArgs& a) {
  TANDEM_CHECK(std::filesystem::exists(a.file), "token file {} does not exist", a.file);
  std::optional<tokenizer::Tokenizer> tok;
  if (!a.tokenizer.empty()) tok.emplace(tokenizer::Tokenizer::from_file(a.tokenizer));
  std::optional<io::TokenSidecar> sidecar;
  std::string sidecar_path = io::sidecar_path_for(a.file);
  if (std::filesystem::exists(sidecar_path))
    sidecar = io::parse_token_sidecar(core::read_file(sidecar_path), sidecar_path);
  // dtype: flag, else sidecar, else the tokenizer's vocabulary.
  std::string dtype_name = a.dtype;
  if (dtype_name.empty() && sidecar) dtype_name = io::token_dtype_name(sidecar->dtype);
  if (dtype_name.empty() && tok)
    dtype_name = io::token_dtype_name(io::token_dtype_for_vocab(tok->vocab_size()));
  TANDEM_CHECK(!dtype_name.empty(),
               "cannot tell the dtype of {} (no sidecar): pass --dtype or --tokenizer", a.file);
  io::TokenFile file(a.file, io::token_dtype_from_name(dtype_name));
  std::int64_t eos = a.eos_id;
  if (eos < 0 && sidecar) eos = static_cast<std::int64_t>(sidecar->eos_id);
  if (eos < 0 && tok && tok->eos_id()) eos = *tok->eos_id();
  if (eos < 0) eos = 100257;  // dolma2

  std::uint64_t documents = 0, max_id = 0;
  std::vector<std::int64_t> block;
  for (std::uint64_t start = 0; start < file.num_tokens(); start += 1 << 16) {
    block.resize(std::min<std::uint64_t>(1 << 16, file.num_tokens() - start));
    file.read(start, block.size(), block.data());
    for (std::int64_t id : block) {
      const auto t = static_cast<std::uint64_t>(id);
      documents += t == static_cast<std::uint64_t>(eos);
      max_id = std::max(max_id, t);
    }
  }
  nlohmann::json out = {
      {"file", a.file},
      {"dtype", dtype_name},
      {"tokens", file.num_tokens()},
      {"documents", documents},
      {"eos_id", eos},
      {"max_id", max_id},
      {"ends_with_eos", file.num_tokens() > 0 &&
                            file.token(file.num_tokens() - 1) == static_cast<std::uint64_t>(eos)}};
  if (sidecar) {
    out["sidecar"] = sidecar_path;
    bool ok = sidecar->tokens == file.num_tokens() && sidecar->dtype == file.dtype() &&
              (file.num_tokens() == 0 || sidecar->checksum == io::token_file_checksum(a.file));
    out["sidecar_matches"] = ok;
  }
  std::vector<std::uint32_t> sample(std::min<std::uint64_t>(a.sample_tokens, file.num_tokens()));
  file.read(0, sample.size(), sample.data());
  out["sample_ids"] = sample;
  if (tok) {
    TANDEM_CHECK(max_id < tok->vocab_size(),
                 "{}: token id {} is outside the vocabulary of {} (size {})", a.file, max_id,
                 a.tokenizer, tok->vocab_size());
    out["sample_text"] = tok->decode(sample);
  }
  return out;
}

}  // namespace

void add_data_inspect_command(CLI::App& data, int& exit_code) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App* cmd =
      data.add_subcommand("inspect", "Show a token file's size, dtype, documents and a sample");
  cmd->add_option("file", args->file, "token file")->required();
  cmd->add_option("--tokenizer", args->tokenizer, "tokenizer.json to decode the sample");
  cmd->add_option("--dtype", args->dtype,
                  "uint8|uint16|uint32|uint64 (default: sidecar or tokenizer)");
  cmd->add_option("--eos-id", args->eos_id, "EOS id (default: sidecar, tokenizer, else 100257)");
  cmd->add_option("--sample-tokens", args->sample_tokens, "tokens in the sample (default 64)");
  cmd->add_flag("--json", args->json, "print JSON");
  cmd->callback([args, &exit_code] {
    nlohmann::json r = inspect(*args);
    if (args->json) {
      fmt::print("{}\n", r.dump(1));
    } else {
      fmt::print(
          "file:      {}\ndtype:     {}\ntokens:    {}\ndocuments: {} (EOS id {})\nmax id:    {}\n",
          r["file"].get<std::string>(), r["dtype"].get<std::string>(),
          r["tokens"].get<std::uint64_t>(), r["documents"].get<std::uint64_t>(),
          r["eos_id"].get<std::int64_t>(), r["max_id"].get<std::uint64_t>());
      if (r.contains("sidecar_matches"))
        fmt::print("sidecar:   {} ({})\n", r["sidecar"].get<std::string>(),
                   r["sidecar_matches"].get<bool>() ? "matches" : "DOES NOT MATCH");
      fmt::print("sample ids: {}\n", r["sample_ids"].dump());
      if (r.contains("sample_text"))
        fmt::print("sample text:\n{}\n", r["sample_text"].get<std::string>());
    }
    // A token file that disagrees with its sidecar is an error, whatever the output format.
    bool mismatch = r.contains("sidecar_matches") && !r["sidecar_matches"].get<bool>();
    exit_code = mismatch ? 1 : 0;
  });
}

}  // namespace tandem::cli
