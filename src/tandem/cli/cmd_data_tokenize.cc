// `tandem data tokenize --tokenizer TOKENIZER.json --out DIR INPUT...`
#include <fmt/format.h>

#include <cstdio>

#include "tandem/cli/commands.h"
#include "tandem/core/error.h"
#include "tandem/tokenizer/tokenize_job.h"

namespace tandem::cli {

namespace {

struct TokenizeArgs {
  tokenizer::TokenizeOptions options;
  std::int64_t eos_id = -1;
  bool json = false;
  bool no_progress = false;
};

void print_report(const tokenizer::TokenizeSummary& s, const tokenizer::TokenizeOptions& o) {
  for (const auto& p : s.problems)
    fmt::print(stderr, "tandem: warning: {}:{}: {}: {}\n", p.path, p.line, p.kind, p.message);
  std::uint64_t bad = 0;
  for (const auto& [kind, n] : s.problem_counts) {
    fmt::print(stderr, "tandem: skipped {} record(s): {}\n", n, kind);
    bad += n;
  }
  if (bad > s.problems.size())
    fmt::print(stderr, "tandem: ({} more problems not listed; use --strict to stop at the first)\n",
               bad - s.problems.size());
  fmt::print(stderr,
             "tandem: tokenized {} documents ({:.1f} MB, {} tokens incl. EOS) into {} new file(s) "
             "in {}; kept {} finished file(s); {:.1f} s, {:.2f}M tokens/s\n",
             s.documents, s.text_bytes / 1e6, s.tokens, s.files_written.size(), o.out_dir,
             s.files_kept.size(), s.seconds, s.seconds > 0 ? s.tokens / 1e6 / s.seconds : 0.0);
}

}  // namespace

void add_data_tokenize_command(CLI::App& data, int& exit_code) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = data.add_subcommand(
      "tokenize", "Tokenize text/JSONL(.gz/.zst) inputs into OLMo-core token files");
  auto& o = args->options;
  cmd->add_option("--tokenizer", o.tokenizer_path, "HF tokenizer.json (byte-level BPE)")
      ->required();
  cmd->add_option("--out", o.out_dir, "output directory")->required();
  cmd->add_option("inputs", o.inputs, "input files, directories or globs")->required();
  cmd->add_option("--max-tokens-per-file", o.max_tokens_per_file,
                  "split outputs at this many tokens (default 2^28)");
  cmd->add_option("--threads", o.threads, "tokenizer threads (output is identical for any count)");
  cmd->add_option("--eos-id", args->eos_id, "EOS id (default: the tokenizer's <|endoftext|>)");
  cmd->add_option("--prefix", o.prefix, "output name prefix (default 'part')");
  cmd->add_flag("--strict", o.strict, "fail on the first malformed or non-UTF-8 record");
  cmd->add_flag("--dolma", o.dolma_documents,
                "documents as dolma's `dolma tokens` makes them: text stripped of leading and "
                "trailing whitespace, empty ones skipped, EOS unless the ids end with it");
  cmd->add_flag("--encode-special-tokens", o.encode_special_tokens,
                "special tokens written in the text are encoded as text (dolma's "
                "--tokenizer.encode_special_tokens)");
  cmd->add_flag("--no-progress", args->no_progress, "no progress bar");
  cmd->add_flag("--json", args->json, "print a JSON summary on stdout");
  cmd->callback([args, &exit_code] {
    tokenizer::TokenizeOptions options = args->options;
    if (args->eos_id >= 0) options.eos_id = static_cast<std::uint32_t>(args->eos_id);
    options.progress = !args->no_progress && !args->json;
    tokenizer::TokenizeSummary summary = tokenizer::run_tokenize(options);
    print_report(summary, options);
    if (args->json) fmt::print("{}\n", summary.to_json().dump(1));
    exit_code = 0;
  });
}

}  // namespace tandem::cli
