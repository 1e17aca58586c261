#include "tandem/io/text_inputs.h"

#include <glob.h>

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "tandem/core/error.h"
#include "tandem/core/utf8.h"
#include "tandem/io/json.h"

namespace tandem::io {
namespace fs = std::filesystem;

InputFormat input_format_for(const std::string& path) {
  std::string base = strip_compression_suffix(path);
  auto ends = [&](const char* s) {
    std::string suffix(s);
    return base.size() >= suffix.size() &&
           base.compare(base.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends(".jsonl") || ends(".json") ? InputFormat::kJsonl : InputFormat::kText;
}

namespace {

void add_file(const std::string& path, std::vector<InputFile>& out) {
  std::error_code ec;
  auto size = fs::file_size(path, ec);
  if (ec) core::fail("cannot read input {}: {}", path, ec.message());
  out.push_back({path, input_format_for(path), size});
}

void add_directory(const std::string& dir, std::vector<InputFile>& out) {
  std::vector<std::string> files;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (it->is_regular_file()) files.push_back(it->path().string());
  }
  if (ec) core::fail("cannot list input directory {}: {}", dir, ec.message());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) add_file(f, out);
}

bool has_glob_chars(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

}  // namespace

std::vector<InputFile> expand_inputs(const std::vector<std::string>& args) {
  TANDEM_CHECK(!args.empty(), "no inputs given");
  std::vector<InputFile> out;
  for (const auto& arg : args) {
    std::error_code ec;
    if (fs::is_directory(arg, ec)) {
      std::size_t before = out.size();
      add_directory(arg, out);
      TANDEM_CHECK(out.size() > before, "input directory {} holds no files", arg);
    } else if (fs::exists(arg, ec)) {
      add_file(arg, out);
    } else if (has_glob_chars(arg)) {
      glob_t g{};
      int rc = ::glob(arg.c_str(), 0, nullptr, &g);
      std::vector<std::string> matches;
      if (rc == 0)
        for (std::size_t i = 0; i < g.gl_pathc; ++i) matches.emplace_back(g.gl_pathv[i]);
      ::globfree(&g);
      TANDEM_CHECK(!matches.empty(), "input pattern {} matches no files", arg);
      std::sort(matches.begin(), matches.end());
      for (const auto& m : matches) {
        if (fs::is_directory(m, ec)) {
          add_directory(m, out);
        } else {
          add_file(m, out);
        }
      }
    } else {
      core::fail("input {} does not exist", arg);
    }
  }
  return out;
}

DocumentReader::DocumentReader(const std::string& path)
    : DocumentReader(path, input_format_for(path)) {}

DocumentReader::DocumentReader(const std::string& path, InputFormat format)
    : path_(path), format_(format), source_(open_byte_source(path)) {
  if (format_ == InputFormat::kJsonl) lines_ = std::make_unique<LineReader>(*source_);
}

void DocumentReader::problem(std::uint64_t line, const char* kind, std::string message) {
  problems_.push_back({path_, line, kind, std::move(message)});
}

void DocumentReader::skip_through(std::uint64_t line) {
  if (format_ == InputFormat::kText) {
    if (line >= 1) text_done_ = true;
    return;
  }
  while (lines_->line_number() < line && lines_->next(line_)) {
  }
}

bool DocumentReader::next(Document& doc) {
  if (format_ == InputFormat::kText) {
    if (text_done_) return false;
    text_done_ = true;
    doc.text = read_all(*source_);
    doc.id = path_;
    doc.line = 1;
    std::size_t bad = core::utf8::first_invalid(doc.text);
    if (bad != doc.text.size()) {
      auto line = 1 + std::count(doc.text.begin(),
                                 doc.text.begin() + static_cast<std::ptrdiff_t>(bad), '\n');
      problem(static_cast<std::uint64_t>(line), "non_utf8",
              "not valid UTF-8 (byte offset " + std::to_string(bad) + ")");
      return false;
    }
    return true;
  }
  while (lines_->next(line_)) {
    const std::uint64_t n = lines_->line_number();
    if (line_.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank line
    std::size_t bad = core::utf8::first_invalid(line_);
    if (bad != line_.size()) {
      problem(n, "non_utf8", "not valid UTF-8 (byte " + std::to_string(bad + 1) + " of the line)");
      continue;
    }
    nlohmann::json j;
    try {
      // Strict: a record with two "text" keys, or nested absurdly deep, is malformed.
      j = parse_json(line_, "record");
    } catch (const core::Error& e) {
      std::string what = e.what();
      bool surrogate = what.find("surrogate") != std::string::npos;
      problem(n, surrogate ? "non_utf8" : "malformed_json",
              surrogate ? "text holds a lone UTF-16 surrogate escape" : what);
      continue;
    }
    if (!j.is_object() || !j.contains("text") || !j["text"].is_string()) {
      problem(n, "missing_text", "no string \"text\" field");
      continue;
    }
    doc.text = std::move(j["text"].get_ref<std::string&>());
    doc.line = n;
    if (j.contains("id") && j["id"].is_string()) {
      doc.id = j["id"].get<std::string>();
    } else {
      doc.id = path_ + ":" + std::to_string(n);
    }
    return true;
  }
  return false;
}

}  // namespace tandem::io
