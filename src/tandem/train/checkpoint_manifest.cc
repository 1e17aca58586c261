#include "tandem/train/checkpoint_manifest.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "tandem/core/error.h"
#include "tandem/io/json.h"

namespace tandem::train {
namespace {

bool is_hex64(const std::string& s) {
  return s.size() == 16 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

void check_relative_name(const std::string& name, const std::string& where) {
  const std::filesystem::path p(name);
  TANDEM_CHECK(!name.empty() && !p.is_absolute() && !p.has_root_directory(),
               "{}: file name '{}' is not a relative path inside the checkpoint", where, name);
  for (const auto& part : p)
    TANDEM_CHECK(part != ".." && part != ".", "{}: file name '{}' holds '{}'", where, name,
                 part.string());
}

}  // namespace

CheckpointManifest parse_checkpoint_manifest(std::string_view text, const std::string& where) {
  const nlohmann::json j = io::parse_json(text, where);
  TANDEM_CHECK(j.is_object(), "{}: expected a JSON object, got {}", where, io::json_excerpt(j));
  CheckpointManifest m;
  m.format_version = io::json_field<int>(j, "format_version", where);
  TANDEM_CHECK(m.format_version == 1 || m.format_version == 2,
               "{}: format_version {} is not one tandem reads (1 or 2)", where, m.format_version);
  m.step = io::json_field<std::int64_t>(j, "step", where);
  TANDEM_CHECK(m.step >= 0, "{}: step {} is negative", where, m.step);
  const auto files = io::json_field<nlohmann::json>(j, "files", where);
  TANDEM_CHECK(files.is_object(), "{}: 'files' must be an object of name -> {{bytes, xxh64}}",
               where);
  std::set<std::string> names;
  for (const auto& [name, info] : files.items()) {
    const std::string entry = where + ": files['" + name + "']";
    check_relative_name(name, where);
    ManifestEntry e;
    e.name = name;
    e.bytes = io::json_field<std::uint64_t>(info, "bytes", entry);
    e.xxh64 = io::json_field<std::string>(info, "xxh64", entry);
    TANDEM_CHECK(is_hex64(e.xxh64), "{}: core::xxh64 '{}' is not 16 lower-case hex digits", entry,
                 e.xxh64);
    names.insert(name);
    m.files.push_back(std::move(e));
  }
  for (const char* required : kRequiredCheckpointFiles)
    TANDEM_CHECK(names.count(required), "{}: does not list {}, which every checkpoint holds", where,
                 required);
  TANDEM_CHECK(names.count(kWholeWeightsFile) || names.count(kShardedWeightsIndex),
               "{}: lists neither {} nor {}: no model weights", where, kWholeWeightsFile,
               kShardedWeightsIndex);
  return m;
}

void check_trainer_state(const nlohmann::json& state, std::int64_t expected_step,
                         const std::string& where) {
  TANDEM_CHECK(state.is_object(), "{}: expected a JSON object, got {}", where,
               io::json_excerpt(state));
  const auto step = io::json_field<std::int64_t>(state, "step", where);
  TANDEM_CHECK(step == expected_step, "{}: step {} differs from the checkpoint's step {}", where,
               step, expected_step);
  TANDEM_CHECK(io::json_field<std::int64_t>(state, "tokens", where) >= 0, "{}: tokens is negative",
               where);
  for (const char* counter : {"skipped_steps", "nonfinite_steps", "consecutive_nonfinite"}) {
    if (state.contains(counter))
      TANDEM_CHECK(io::json_field<std::int64_t>(state, counter, where) >= 0, "{}: {} is negative",
                   where, counter);
  }
  for (const char* object : {"skip_step", "loader"})
    TANDEM_CHECK(io::json_field<nlohmann::json>(state, object, where).is_object(),
                 "{}: field '{}' must be an object", where, object);
}

}  // namespace tandem::train
