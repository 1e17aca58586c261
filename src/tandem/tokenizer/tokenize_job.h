// `tandem data tokenize`: text inputs -> OLMo-core token files (EOS after every document, no
// BOS; or documents as dolma's `dolma tokens` makes them) of at most max_tokens_per_file tokens
// each, with sidecars. Documents are tokenized in
// parallel but written in input order, so the output bytes do not depend on the thread count.
// A re-run with the same settings keeps the parts already finished (verified by checksum) and
// continues after them.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tandem/io/text_inputs.h"

namespace tandem::tokenizer {

struct TokenizeOptions {
  std::string tokenizer_path;
  std::string out_dir;
  std::vector<std::string> inputs;
  std::uint64_t max_tokens_per_file = 1ull << 28;  // 1 GiB of uint32 ids
  int threads = 1;
  std::optional<std::uint32_t> eos_id;  // default: the tokenizer's <|endoftext|>
  bool strict = false;                  // fail on the first bad record
  bool progress = true;                 // progress bar on stderr when it is a terminal
  std::string prefix = "part";          // output names: <prefix>-00000.npy
  // dolma's `dolma tokens` documents (dolma_documents.h): the text stripped, a document empty
  // once stripped skipped, EOS appended unless the ids end with it.
  bool dolma_documents = false;
  // Special tokens written in the text are encoded as text (dolma's
  // --tokenizer.encode_special_tokens, HF tokenizers' encode_special_tokens).
  bool encode_special_tokens = false;
};

struct TokenizeSummary {
  std::vector<std::string> files_written;
  std::vector<std::string> files_kept;  // finished by an earlier run
  std::uint64_t documents = 0;          // tokenized in this run
  std::uint64_t empty_documents = 0;    // skipped: no text (with dolma_documents: once stripped)
  std::uint64_t tokens = 0;             // written in this run, EOS included
  std::uint64_t text_bytes = 0;
  std::map<std::string, std::uint64_t> problem_counts;
  std::vector<io::InputProblem> problems;  // the first ones, for the report
  double seconds = 0;
  std::string dtype;
  std::uint32_t eos_id = 0;
  std::string tokenizer_sha256;
  nlohmann::json to_json() const;
};

TokenizeSummary run_tokenize(const TokenizeOptions& options);

}  // namespace tandem::tokenizer
