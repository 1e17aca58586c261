// Inputs that used to be accepted silently, crash, or fail with a library's message without the
// file or key: YAML configs (repeated keys, values of the wrong type, non-scalar keys), JSON
// nested too deep (safetensors headers overflowed the stack), .npy headers (huge or negative
// dimensions), names from files that lead outside their directory, a directory read as a file,
// and a token file truncated while it is read.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "safetensors_test_util.h"
#include "tandem/core/path_inside.h"
#include "tandem/io/config.h"
#include "tandem/io/json.h"
#include "tandem/io/npy.h"
#include "tandem/io/safetensors.h"
#include "tandem/io/token_file.h"

namespace tandem {
namespace {

using namespace core;
using namespace io;

namespace fs = std::filesystem;
using testing::expect_error;

std::string write_text(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(StrictYaml, RepeatedKeyIsAnErrorNamingKeyAndLines) {
  const std::string dir = testing::scratch_dir();
  const std::string path = write_text(dir, "run.yaml",
                                      "optim:\n"
                                      "  lr: 1.0e-3\n"
                                      "  weight_decay: 0.1\n"
                                      "  lr: 3.0e-4\n");
  expect_error([&] { load_yaml_config(path); },
               {path, "line 4", "key 'lr' appears twice", "first at line 2"});
  const std::string top = write_text(dir, "top.yaml", "a: 1\nb: 2\na: 3\n");
  expect_error([&] { load_yaml_config(top); }, {top, "key 'a' appears twice"});
}

TEST(StrictYaml, RepeatedKeyInAnOverrideIsAnError) {
  const std::string dir = testing::scratch_dir();
  const std::string path = write_text(dir, "run.yaml", "a: 1\n");
  expect_error([&] { load_yaml_config(path, {"b={x: 1, x: 2}"}); },
               {"override 'b={x: 1, x: 2}'", "key 'x' appears twice"});
}

TEST(StrictYaml, NonScalarKeyIsAnError) {
  const std::string dir = testing::scratch_dir();
  const std::string path = write_text(dir, "run.yaml", "? [a, b]\n: 1\n");
  expect_error([&] { load_yaml_config(path); }, {path, "must be a plain name"});
}

TEST(StrictYaml, WrongTypeNamesTheKeyNotBadConversion) {
  const std::string dir = testing::scratch_dir();
  const std::string path = write_text(dir, "run.yaml", "trainer: {max_steps: [1], name: {a: 1}}\n");
  YAML::Node root = load_yaml_config(path);
  ConfigSection trainer(root["trainer"], "trainer", path);
  expect_error([&] { trainer.get_int("max_steps"); },
               {path, "trainer.max_steps", "expected an integer"});
  expect_error([&] { yaml_as<double>(root["trainer"]["name"], "trainer.name", "a number"); },
               {"trainer.name", "expected a number"});
}

TEST(StrictYaml, ListsOfNumbersAndOfMappingsNameTheKey) {
  const std::string dir = testing::scratch_dir();
  const std::string path =
      write_text(dir, "run.yaml",
                 "s: {m: [1, 0.5, abc], n: 3, items: [{a: 1}, [2], {b: 2}], flat: [{x: 1}]}\n");
  YAML::Node root = load_yaml_config(path);
  ConfigSection s(root["s"], "s", path);
  expect_error([&] { s.get_double_list("m"); }, {path, "s.m", "expected a number"});
  expect_error([&] { s.get_double_list("n"); }, {"s.n", "expected a list of numbers"});
  expect_error([&] { s.section_list("items"); }, {"s.items", "item 1 is not a mapping"});
  std::vector<ConfigSection> flat = s.section_list("flat");
  ASSERT_EQ(flat.size(), 1u);
  EXPECT_EQ(flat[0].path(), "s.flat[0]");
  expect_error([&] { flat[0].get_string("y"); }, {path, "s.flat[0].y", "is required"});
}

TEST(StrictYaml, AliasBombIsAnError) {
  const std::string dir = testing::scratch_dir();
  std::string text = "a: &a [x, x, x, x, x, x, x, x, x, x]\n";
  char prev = 'a';
  for (char c = 'b'; c <= 'h'; ++c) {
    text += std::string(1, c) + ": &" + c + " [";
    for (int i = 0; i < 10; ++i) text += std::string(i ? ", " : "") + "*" + prev;
    text += "]\n";
    prev = c;
  }
  const std::string path = write_text(dir, "bomb.yaml", text);
  expect_error([&] { load_yaml_config(path); }, {path, "YAML nodes"});
}

TEST(StrictJson, DeepNestingIsAnErrorNotAStackOverflow) {
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  expect_error([&] { parse_json(deep, "deep.json"); }, {"deep.json", "nested more than 64"});
  // In a safetensors header, where formatting the error used to recurse through it.
  const std::string dir = testing::scratch_dir();
  const std::string header =
      "{\"t\": {\"dtype\": \"F32\", \"shape\": [" + deep + "], \"data_offsets\": [0, 4]}}";
  const std::string path = dir + "/deep.safetensors";
  std::ofstream(path, std::ios::binary) << testing::safetensors_bytes(header, 4);
  expect_error([&] { SafetensorsFile f(path); }, {path, "nested more than 64"});
}

TEST(StrictJson, RepeatedKeyAndWrongTypesAreNamed) {
  expect_error([&] { parse_json(R"({"a": 1, "a": 2})", "x.json"); },
               {"x.json", "key 'a' appears twice"});
  const nlohmann::json j = parse_json(R"({"n": -1, "s": 3, "big": 4294967296})", "y.json");
  expect_error([&] { json_field<std::uint64_t>(j, "n", "y.json"); },
               {"y.json: field 'n'", "non-negative integer", "-1"});
  expect_error([&] { json_field<std::string>(j, "s", "y.json"); }, {"field 's'", "a string"});
  expect_error([&] { json_field<std::uint32_t>(j, "big", "y.json"); },
               {"field 'big'", "4294967296"});
  expect_error([&] { json_field<int>(j, "missing", "y.json"); },
               {"y.json: missing field 'missing'"});
}

std::string npy_bytes(const std::string& header, std::size_t data_bytes) {
  std::string h = header;
  h.append((64 - (10 + h.size() + 1) % 64) % 64, ' ');
  h += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(1);
  out += static_cast<char>(0);
  out += static_cast<char>(h.size() & 0xff);
  out += static_cast<char>(h.size() >> 8);
  return out + h + std::string(data_bytes, '\0');
}

TEST(StrictNpy, HeaderDimensionsAreCheckedNotParsedLoosely) {
  const std::string dir = testing::scratch_dir();
  auto npy = [&](const std::string& name, const std::string& header, std::size_t bytes) {
    const std::string path = dir + "/" + name;
    std::ofstream(path, std::ios::binary) << npy_bytes(header, bytes);
    return path;
  };
  // A dimension past 64 bits used to escape as std::stoll's out_of_range.
  std::string p =
      npy("huge.npy",
          "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", 8);
  expect_error([&] { read_npy(p); }, {p, "shape entry", "63 bits"});
  // A negative dimension used to be read as its digits (-3 -> 3).
  p = npy("negative.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (-3,), }", 12);
  expect_error([&] { read_npy(p); }, {p, "non-negative"});
  // Dimensions whose product overflows must not wrap to the data's size.
  p = npy("overflow.npy",
          "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4), }", 0);
  expect_error([&] { read_npy(p); }, {p, "needs more bytes"});
  p = npy("unknown.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", 4);
  expect_error([&] { read_npy(p); }, {p, "unknown key 'x'"});
  p = npy("bigendian.npy", "{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", 4);
  expect_error([&] { read_npy(p); }, {p, "'>f4'"});
  p = npy("ok.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 0, 3), }", 0);
  EXPECT_EQ(read_npy(p).numel(), 0);
  // An empty float array converts to an empty vector (its buffers are null: the fuzzer found a
  // memcpy from them, undefined behaviour even for 0 bytes).
  EXPECT_TRUE(read_npy(p).as_f32().empty());
  p = npy("ok2.npy", "{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }", 16);
  EXPECT_EQ(read_npy(p).as_i64().size(), 2u);
}

TEST(PathInside, AbsoluteDotDotAndSymlinksOutAreRefused) {
  const std::string dir = testing::scratch_dir();
  const std::string outside = testing::temp_dir("st_outside");  // a sibling of dir
  fs::create_directories(dir + "/inner");
  fs::create_directory_symlink(outside, dir + "/link");
  EXPECT_EQ(path_inside(dir, "inner/x.safetensors", "index.json"), dir + "/inner/x.safetensors");
  expect_error([&] { path_inside(dir, "/etc/passwd", "index.json"); }, {"index.json", "absolute"});
  expect_error([&] { path_inside(dir, "inner/../../x", "index.json"); }, {"index.json", "'..'"});
  expect_error([&] { path_inside(dir, "link/x.safetensors", "index.json"); },
               {"index.json", "leads out of", "symbolic link"});
  expect_error([&] { path_inside(dir, "", "index.json"); }, {"index.json", "empty"});
}

TEST(PathInside, HfIndexShardLinkedOutsideIsRefused) {
  const std::string dir = testing::scratch_dir();
  const std::string outside = testing::temp_dir("st_elsewhere");
  float v[2] = {1, 2};
  write_safetensors(outside + "/real.safetensors", {{"w", DType::kF32, {2}, v}});
  fs::create_symlink(outside + "/real.safetensors", dir + "/shard.safetensors");
  write_file_atomic(dir + "/model.safetensors.index.json",
                    R"({"weight_map": {"w": "shard.safetensors"}})");
  expect_error([&] { SafetensorsCheckpoint c(dir); },
               {"model.safetensors.index.json", "shard.safetensors", "leads out of"});
}

TEST(ReadFile, DirectoryIsNamedNotBasicFilebufUnderflow) {
  const std::string dir = testing::scratch_dir();
  expect_error([&] { read_file(dir); }, {dir, "is a directory"});
  expect_error([&] { load_yaml_config(dir); }, {dir, "is a directory"});
  expect_error([&] { read_file(dir + "/missing"); }, {dir + "/missing", "No such file"});
}

TEST(TokenFileRead, TruncatedAfterOpenIsAnErrorNotSigbus) {
  const std::string dir = testing::scratch_dir();
  const std::string path = dir + "/tokens.npy";
  std::vector<std::uint16_t> ids(4096);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::uint16_t>(i);
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(ids.data()),
             static_cast<std::streamsize>(ids.size() * 2));
  TokenFile file(path, TokenDtype::kU16);
  std::vector<std::int64_t> out(16);
  file.read(4000, 16, out.data());
  EXPECT_EQ(out[0], 4000);
  fs::resize_file(path, 1000);
  expect_error([&] { file.read(4000, 16, out.data()); },
               {path, "changed while it was being read", "8192 bytes"});
}

}  // namespace
}  // namespace tandem
