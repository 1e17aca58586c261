// Text inputs for tokenization: plain text files (one document each) and JSONL files with a
// "text" field (the dolma format), optionally .gz or .zst compressed, named as files,
// directories (searched recursively) or glob patterns. Bad records (malformed JSON, no text,
// non-UTF-8) are recorded as problems with file:line and skipped; unreadable or truncated files
// throw tandem::core::Error.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tandem/io/compressed_reader.h"

namespace tandem::io {

enum class InputFormat { kText, kJsonl };

struct InputFile {
  std::string path;
  InputFormat format = InputFormat::kText;
  std::uint64_t size = 0;  // bytes on disk
};

// JSONL when the name (without .gz/.zst) ends in .jsonl or .json, else plain text.
InputFormat input_format_for(const std::string& path);
// Expands each argument (file, directory, or glob) to files, in a deterministic order: the
// arguments' order, and sorted paths within a directory or glob. Throws Error for an argument
// that names nothing, or a file that cannot be read.
std::vector<InputFile> expand_inputs(const std::vector<std::string>& args);

struct Document {
  std::string id;          // JSONL "id" when it is a string, else "path:line"
  std::string text;        // valid UTF-8
  std::uint64_t line = 0;  // 1-based record position (JSONL line; 1 for a text file)
};

struct InputProblem {
  std::string path;
  std::uint64_t line = 0;
  std::string kind;  // "malformed_json", "missing_text", "non_utf8", "encode_error"
  std::string message;
};

class DocumentReader {
 public:
  explicit DocumentReader(const std::string& path);
  DocumentReader(const std::string& path, InputFormat format);
  // Next good document; false at the end. Throws Error for unreadable/truncated input.
  bool next(Document& doc);
  // Skips records up to and including line `line` without parsing them (for resuming).
  void skip_through(std::uint64_t line);
  const std::vector<InputProblem>& problems() const { return problems_; }

 private:
  void problem(std::uint64_t line, const char* kind, std::string message);
  std::string path_;
  InputFormat format_;
  std::unique_ptr<ByteSource> source_;
  std::unique_ptr<LineReader> lines_;
  bool text_done_ = false;
  std::string line_;
  std::vector<InputProblem> problems_;
};

}  // namespace tandem::io
