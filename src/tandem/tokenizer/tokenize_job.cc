#include "tandem/tokenizer/tokenize_job.h"

#include <fmt/format.h>
#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "tandem/core/error.h"
#include "tandem/core/hash.h"
#include "tandem/core/utf8.h"
#include "tandem/io/token_file.h"
#include "tandem/io/token_file_writer.h"
#include "tandem/io/token_sidecar.h"
#include "tandem/tokenizer/dolma_documents.h"
#include "tandem/tokenizer/tokenizer.h"

namespace tandem::tokenizer {
namespace fs = std::filesystem;

namespace {

constexpr std::size_t kBatchBytes = 8 << 20;
constexpr std::size_t kBatchDocuments = 4096;
constexpr std::size_t kReportedProblems = 20;

// Where the next token comes from: the document at (input, line), of which `offset` tokens
// (its ids followed by EOS) are already written.
struct Cursor {
  std::uint64_t input = 0;
  std::uint64_t line = 0;
  std::uint64_t offset = 0;
  nlohmann::json to_json(const std::vector<io::InputFile>& inputs) const {
    return {{"input", input},
            {"path", input < inputs.size() ? inputs[input].path : ""},
            {"line", line},
            {"offset", offset}};
  }
};

std::string part_path(const TokenizeOptions& o, std::size_t index) {
  return (fs::path(o.out_dir) / fmt::format("{}-{:05d}.npy", o.prefix, index)).string();
}

// Identifies the run's settings: a different fingerprint in DIR means outputs of another run.
std::string run_fingerprint(const Tokenizer& tok, std::uint32_t eos, io::TokenDtype dtype,
                            const TokenizeOptions& o, const std::vector<io::InputFile>& inputs) {
  std::string s = fmt::format("tandem-tokenize-v1\n{}\n{}\n{}\n{}\n", tok.sha256(), eos,
                              io::token_dtype_name(dtype), o.max_tokens_per_file);
  if (o.dolma_documents) s += "dolma-documents\n";
  if (o.encode_special_tokens) s += "encode-special-tokens\n";
  for (const auto& in : inputs) s += fmt::format("{}\t{}\n", in.path, in.size);
  return core::sha256_hex(s);
}

class Progress {
 public:
  Progress(bool enabled, std::uint64_t total_bytes)
      : enabled_(enabled && ::isatty(::fileno(stderr))),
        total_(total_bytes),
        start_(std::chrono::steady_clock::now()) {}
  void update(std::uint64_t done_bytes, std::uint64_t tokens, bool force = false) {
    if (!enabled_) return;
    auto now = std::chrono::steady_clock::now();
    if (!force && now - last_ < std::chrono::milliseconds(200)) return;
    last_ = now;
    double frac = total_ ? static_cast<double>(done_bytes) / static_cast<double>(total_) : 1.0;
    double secs = std::chrono::duration<double>(now - start_).count();
    int filled = static_cast<int>(frac * 30);
    fmt::print(stderr, "\r[{}{}] {:5.1f}%  {:.1f}M tokens  {:.2f}M tokens/s ",
               std::string(filled, '#'), std::string(30 - filled, '.'), 100 * frac, tokens / 1e6,
               secs > 0 ? tokens / 1e6 / secs : 0.0);
  }
  void finish() {
    if (enabled_) fmt::print(stderr, "\n");
  }

 private:
  bool enabled_;
  std::uint64_t total_;
  std::chrono::steady_clock::time_point start_, last_;
};

// Cleans temporaries a killed run may have left beside the final names.
void remove_stale_temporaries(const TokenizeOptions& o) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(o.out_dir, ec)) {
    std::string name = entry.path().filename().string();
    if (name.rfind(o.prefix + "-", 0) == 0 && name.find(".tmp.") != std::string::npos)
      fs::remove(entry.path(), ec);
  }
}

}  // namespace

nlohmann::json TokenizeSummary::to_json() const {
  nlohmann::json problems_json = nlohmann::json::array();
  for (const auto& p : problems)
    problems_json.push_back(
        {{"path", p.path}, {"line", p.line}, {"kind", p.kind}, {"message", p.message}});
  return {{"files_written", files_written},
          {"files_kept", files_kept},
          {"documents", documents},
          {"empty_documents", empty_documents},
          {"tokens", tokens},
          {"text_bytes", text_bytes},
          {"problem_counts", problem_counts},
          {"problems", problems_json},
          {"seconds", seconds},
          {"dtype", dtype},
          {"eos_id", eos_id},
          {"tokenizer_sha256", tokenizer_sha256}};
}

TokenizeSummary run_tokenize(const TokenizeOptions& o) {
  auto started = std::chrono::steady_clock::now();
  TANDEM_CHECK(o.threads >= 1, "--threads must be at least 1 (got {})", o.threads);
  TANDEM_CHECK(o.max_tokens_per_file >= 1, "--max-tokens-per-file must be at least 1");
  // Outputs (and the temporaries a re-run deletes) stay inside --out.
  TANDEM_CHECK(!o.prefix.empty() && o.prefix.find('/') == std::string::npos && o.prefix != "." &&
                   o.prefix != "..",
               "--prefix '{}' must be a plain file name prefix", o.prefix);
  Tokenizer tok = Tokenizer::from_file(o.tokenizer_path);
  std::optional<std::uint32_t> eos = o.eos_id ? o.eos_id : tok.eos_id();
  TANDEM_CHECK(eos.has_value(), "{} has no <|endoftext|> token; pass --eos-id", o.tokenizer_path);
  TANDEM_CHECK(*eos < tok.vocab_size(), "EOS id {} is outside the vocabulary (size {})", *eos,
               tok.vocab_size());
  const io::TokenDtype dtype = io::token_dtype_for_vocab(tok.vocab_size());
  std::vector<io::InputFile> inputs = io::expand_inputs(o.inputs);

  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  TANDEM_CHECK(!ec, "cannot create output directory {}: {}", o.out_dir, ec.message());
  remove_stale_temporaries(o);
  const std::string fingerprint = run_fingerprint(tok, *eos, dtype, o, inputs);

  TokenizeSummary summary;
  summary.dtype = io::token_dtype_name(dtype);
  summary.eos_id = *eos;
  summary.tokenizer_sha256 = tok.sha256();

  // Keep the finished parts of an earlier run of the same job.
  Cursor cursor;
  std::size_t part = 0;
  while (true) {
    std::string path = part_path(o, part);
    if (!fs::exists(io::sidecar_path_for(path))) break;
    nlohmann::json sidecar = io::verified_sidecar(path);
    if (sidecar.is_null()) break;  // incomplete or damaged: redo from here
    TANDEM_CHECK(sidecar.value("run_fingerprint", "") == fingerprint,
                 "{} holds outputs of a different tokenize run ({} has another tokenizer, inputs "
                 "or settings); use an empty --out directory",
                 o.out_dir, io::sidecar_path_for(path));
    // verified_sidecar parsed it; a part of a tokenize run always records where it ended.
    const io::TokenSidecar parsed =
        io::parse_token_sidecar(sidecar.dump(), io::sidecar_path_for(path));
    TANDEM_CHECK(parsed.end.has_value(), "{}: no 'end' cursor (not written by data tokenize?)",
                 io::sidecar_path_for(path));
    cursor = {parsed.end->input, parsed.end->line, parsed.end->offset};
    TANDEM_CHECK(cursor.input <= inputs.size(), "{}: end cursor names input #{} of {}",
                 io::sidecar_path_for(path), cursor.input, inputs.size());
    summary.files_kept.push_back(path);
    ++part;
  }

  std::uint64_t total_bytes = 0, done_bytes = 0;
  for (const auto& in : inputs) total_bytes += in.size;
  for (std::uint64_t i = 0; i < cursor.input && i < inputs.size(); ++i)
    done_bytes += inputs[i].size;
  Progress progress(o.progress, total_bytes);

  std::vector<std::unique_ptr<Encoder>> encoders;
  for (int t = 0; t < o.threads; ++t)
    encoders.push_back(std::make_unique<Encoder>(tok, o.encode_special_tokens));

  std::unique_ptr<io::TokenFileWriter> writer;
  Cursor part_start = cursor;
  auto commit_part = [&](const Cursor& end) {
    nlohmann::json extra = {{"tokenizer_sha256", tok.sha256()},
                            {"tokenizer", fs::path(o.tokenizer_path).filename().string()},
                            {"run_fingerprint", fingerprint},
                            {"start", part_start.to_json(inputs)},
                            {"end", end.to_json(inputs)}};
    writer->commit(extra);
    summary.files_written.push_back(writer->path());
    writer.reset();
    part_start = end;
    ++part;
  };
  // Writes one document's tokens (ids then EOS), skipping `skip` already written ones.
  auto write_document = [&](std::uint64_t input, std::uint64_t line,
                            std::vector<std::uint32_t>& ids, std::uint64_t skip) {
    if (o.dolma_documents) {
      append_eos_like_dolma(ids, *eos);
    } else {
      ids.push_back(*eos);
    }
    std::uint64_t pos = skip;
    while (pos < ids.size()) {
      if (!writer) writer = std::make_unique<io::TokenFileWriter>(part_path(o, part), dtype, *eos);
      std::uint64_t room = o.max_tokens_per_file - writer->tokens();
      std::uint64_t n = std::min<std::uint64_t>(room, ids.size() - pos);
      writer->append(ids.data() + pos, n);
      pos += n;
      if (writer->tokens() == o.max_tokens_per_file) commit_part({input, line, pos});
    }
    summary.tokens += ids.size() - std::min<std::uint64_t>(skip, ids.size());
  };

  std::vector<io::Document> batch;
  std::vector<std::vector<std::uint32_t>> results;
  std::vector<std::string> errors;  // per document of the batch: why it could not be encoded
  Cursor last_written = cursor;
  for (std::uint64_t i = cursor.input; i < inputs.size(); ++i) {
    io::DocumentReader reader(inputs[i].path, inputs[i].format);
    const bool resuming = i == cursor.input && cursor.line > 0;
    if (resuming) reader.skip_through(cursor.line - 1);
    std::size_t problems_seen = 0;
    bool more = true;
    while (more) {
      batch.clear();
      std::size_t bytes = 0;
      io::Document doc;
      while (bytes < kBatchBytes && batch.size() < kBatchDocuments && (more = reader.next(doc))) {
        if (o.dolma_documents && core::utf8::is_valid(doc.text)) {
          const std::string_view kept = strip_python_whitespace(doc.text);
          const auto begin = static_cast<std::size_t>(kept.data() - doc.text.data());
          doc.text.erase(begin + kept.size());
          doc.text.erase(0, begin);
        }
        if (doc.text.empty()) {
          ++summary.empty_documents;
          continue;
        }
        bytes += doc.text.size();
        batch.push_back(std::move(doc));
      }
      for (; problems_seen < reader.problems().size(); ++problems_seen) {
        const io::InputProblem& p = reader.problems()[problems_seen];
        if (o.strict) core::fail("{}:{}: {}: {} (--strict)", p.path, p.line, p.kind, p.message);
        ++summary.problem_counts[p.kind];
        if (summary.problems.size() < kReportedProblems) summary.problems.push_back(p);
      }
      results.resize(batch.size());
      errors.assign(batch.size(), std::string());
#pragma omp parallel for num_threads(o.threads) schedule(dynamic, 1)
      for (std::size_t d = 0; d < batch.size(); ++d) {
        results[d].clear();
        // An exception must not leave an OpenMP region (it would abort the process): each
        // document's failure (e.g. PCRE2's match limit) is kept and reported below.
        try {
          encoders[static_cast<std::size_t>(omp_get_thread_num())]->encode(batch[d].text,
                                                                           results[d]);
        } catch (const std::exception& e) {
          errors[d] = e.what();
        }
      }
      for (std::size_t d = 0; d < batch.size(); ++d) {
        if (!errors[d].empty()) {
          const io::InputProblem p{inputs[i].path, batch[d].line, "encode_error", errors[d]};
          if (o.strict) core::fail("{}:{}: {}: {} (--strict)", p.path, p.line, p.kind, p.message);
          ++summary.problem_counts[p.kind];
          if (summary.problems.size() < kReportedProblems) summary.problems.push_back(p);
          continue;
        }
        std::uint64_t skip = 0;
        if (resuming && batch[d].line == cursor.line) skip = cursor.offset;
        write_document(i, batch[d].line, results[d], skip);
        last_written = {i, batch[d].line, results[d].size()};
        summary.text_bytes += batch[d].text.size();
        ++summary.documents;
      }
      progress.update(done_bytes, summary.tokens);
    }
    done_bytes += inputs[i].size;
    progress.update(done_bytes, summary.tokens, true);
  }
  if (writer && writer->tokens() > 0) commit_part(last_written);
  progress.finish();
  summary.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return summary;
}

}  // namespace tandem::tokenizer
