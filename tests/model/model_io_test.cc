// Weight conversion and loading: hf -> tandem -> hf is bit-exact (fp32 and bf16), vocab padding,
// and clear errors for missing tensors, wrong shapes, NaN weights and broken files.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "../support/test_support.h"
#include "tandem/core/error.h"
#include "tandem/io/npy.h"
#include "tandem/io/safetensors.h"
#include "tandem/model/model_io.h"

namespace fs = std::filesystem;

namespace tandem {
namespace {

using testing::fixture;
using testing::run_tandem;
using testing::temp_dir;

void expect_same_tensors(const std::string& a_dir, const std::string& b_dir) {
  io::SafetensorsCheckpoint a(a_dir), b(b_dir);
  ASSERT_EQ(a.names(), b.names());
  for (const auto& name : a.names()) {
    EXPECT_EQ(a.info(name).dtype, b.info(name).dtype) << name;
    EXPECT_EQ(a.info(name).shape, b.info(name).shape) << name;
    auto ra = a.raw(name), rb = b.raw(name);
    ASSERT_EQ(ra.size(), rb.size()) << name;
    EXPECT_TRUE(std::equal(ra.begin(), ra.end(), rb.begin())) << name << " differs";
  }
}

std::string error_loading(const std::string& dir) {
  try {
    model::load_model(dir, testing::cpu_backend());
  } catch (const core::Error& e) {
    return e.what();
  }
  return "";
}

TEST(Convert, HfToTandemToHfIsBitExact) {
  std::string root = temp_dir("convert_roundtrip");
  auto r1 =
      run_tandem("convert --from hf " + fixture("model/deep") + " --to tandem " + root + "/t");
  ASSERT_EQ(r1.exit_code, 0) << r1.output;
  auto r2 = run_tandem("convert --from tandem " + root + "/t --to hf " + root + "/h");
  ASSERT_EQ(r2.exit_code, 0) << r2.output;
  expect_same_tensors(fixture("model/deep"), root + "/h");
  auto again = model::load_model(root + "/h", testing::cpu_backend());
  EXPECT_EQ(
      again->config().layer_windows,
      model::load_model(fixture("model/deep"), testing::cpu_backend())->config().layer_windows);
}

TEST(Convert, PaddedVocabRoundTripsAndTruncates) {
  std::string root = temp_dir("convert_pad");
  auto r1 = run_tandem("convert --from hf " + fixture("model/gqa") + " --to tandem " + root +
                       "/t --pad-vocab-multiple 128");
  ASSERT_EQ(r1.exit_code, 0) << r1.output;
  auto padded = model::load_model(root + "/t", testing::cpu_backend());
  EXPECT_EQ(padded->config().vocab_size, 101);
  EXPECT_EQ(padded->config().embedding_size, 128);
  const float* emb = padded->param("embeddings.weight").ptr<float>();  // CPU backend: host memory
  for (std::int64_t i = 101 * padded->config().d_model; i < 128 * padded->config().d_model; ++i)
    ASSERT_EQ(emb[i], 0.0f);
  ASSERT_EQ(run_tandem("convert --from tandem " + root + "/t --to hf " + root + "/h").exit_code, 0);
  expect_same_tensors(fixture("model/gqa"), root + "/h");
}

TEST(Convert, Bf16RoundTripIsBitExact) {
  std::string root = temp_dir("convert_bf16");
  ASSERT_EQ(
      run_tandem("convert --from hf " + fixture("model/window") + " --to tandem " + root + "/t")
          .exit_code,
      0);
  ASSERT_EQ(
      run_tandem("convert --from tandem " + root + "/t --to hf " + root + "/b --dtype bfloat16")
          .exit_code,
      0);
  ASSERT_EQ(run_tandem("convert --from hf " + root + "/b --to tandem " + root + "/t2").exit_code,
            0);
  ASSERT_EQ(run_tandem("convert --from tandem " + root + "/t2 --to hf " + root + "/b2").exit_code,
            0);
  expect_same_tensors(root + "/b", root + "/b2");  // bf16 -> fp32 -> bf16 loses nothing
  io::SafetensorsCheckpoint b2(root + "/b2");
  EXPECT_EQ(b2.info("lm_head.weight").dtype, io::DType::kBF16);
}

// A rank of a sharded run reads only its runs of each parameter (read_model_weight_slices): the
// first and last third of every parameter, read alone, hold the whole model's values there (the
// embedding's last third crosses from the fixture's 101 HF rows into the padding to 128, which is
// zero), the middle thirds are not written, and the stored dtype is reported, fp32 and bf16.
TEST(LoadModel, SlicesReadTheirRunsAsTheWholeModelHasThem) {
  model::LoadOptions options;
  options.embedding_size = 128;
  const std::string bf16_dir = temp_dir("slices_bf16");
  {
    const model::ModelWeights w = model::read_model_weights(fixture("model/gqa"), options);
    model::save_hf_model(bf16_dir, w.config, w.flat, io::DType::kBF16);
  }
  for (const auto& [dir, dtype] :
       {std::pair{fixture("model/gqa"), io::DType::kF32}, std::pair{bf16_dir, io::DType::kBF16}}) {
    const model::ModelWeights whole = model::read_model_weights(dir, options);
    ASSERT_EQ(whole.config.vocab_size, 101);
    ASSERT_EQ(whole.config.embedding_size, 128);
    EXPECT_EQ(whole.source_dtype, dtype);
    const model::ParameterLayout layout(whole.config);
    // The whole model is the file's tensors (read here on their own), padding rows zero.
    io::SafetensorsCheckpoint file(dir);
    for (const model::ParameterEntry& e : layout.entries()) {
      const std::vector<float> stored = file.read_f32(model::hf_name_of(e.name));
      ASSERT_LE(static_cast<std::int64_t>(stored.size()), e.numel) << e.name;
      for (std::int64_t i = 0; i < e.numel; ++i)
        ASSERT_EQ(whole.flat[e.offset + i], i < std::ssize(stored) ? stored[i] : 0.0f)
            << e.name << " element " << i;
    }
    const float unwritten = std::nanf("");
    std::vector<float> values(whole.flat.size(), unwritten);
    std::vector<model::WeightSlice> slices;
    for (const model::ParameterEntry& e : layout.entries())
      for (int third : {2, 0}) {
        const std::int64_t lo = e.numel * third / 3, hi = e.numel * (third + 1) / 3;
        slices.push_back(
            {e.name, e.shape, lo,
             std::span<float>(values.data() + e.offset + lo, static_cast<std::size_t>(hi - lo))});
      }
    EXPECT_EQ(model::read_model_weight_slices(dir, whole.config, slices, options), dtype);
    for (const model::ParameterEntry& e : layout.entries()) {
      const std::int64_t a = e.offset + e.numel / 3, b = e.offset + e.numel * 2 / 3;
      for (std::int64_t i = e.offset; i < e.offset + e.numel; ++i) {
        if (i >= a && i < b)
          ASSERT_TRUE(std::isnan(values[i])) << e.name << " element " << i - e.offset;
        else
          ASSERT_EQ(values[i], whole.flat[i]) << e.name << " element " << i - e.offset;
      }
    }
  }
  // A run past a tensor's end is refused, naming the tensor.
  io::SafetensorsCheckpoint weights(fixture("model/gqa"));
  std::vector<float> two(2);
  const std::int64_t n = weights.info("model.norm.weight").numel();
  try {
    weights.read_f32_range_into("model.norm.weight", n - 1, two);
    ADD_FAILURE() << "a run past the end was read";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.norm.weight"), std::string::npos) << e.what();
  }
  weights.read_f32_range_into("model.norm.weight", n - 2, two);
  EXPECT_EQ(two.back(), weights.read_f32("model.norm.weight").back());
}

// Copies a fixture model dir, rewriting its weights through `edit`.
std::string edited_copy(const std::string& name,
                        const std::function<void(std::vector<io::TensorToWrite>&,
                                                 std::vector<std::vector<float>>&)>& edit) {
  std::string dir = temp_dir("edited_" + name);
  fs::copy_file(fixture("model/gqa/config.json"), dir + "/config.json");
  io::SafetensorsCheckpoint src(fixture("model/gqa"));
  std::vector<std::vector<float>> values;
  std::vector<io::TensorToWrite> tensors;
  for (const auto& n : src.names()) values.push_back(src.read_f32(n));
  std::size_t i = 0;
  for (const auto& n : src.names())
    tensors.push_back({n, io::DType::kF32, src.info(n).shape, values[i++].data()});
  edit(tensors, values);
  io::write_safetensors(dir + "/model.safetensors", tensors);
  return dir;
}

TEST(LoadModel, MissingTensorIsNamed) {
  std::string dir = edited_copy("missing", [](auto& t, auto&) {
    std::erase_if(t, [](const io::TensorToWrite& w) {
      return w.name == "model.layers.1.mlp.up_proj.weight";
    });
  });
  std::string e = error_loading(dir);
  EXPECT_NE(e.find("model.layers.1.mlp.up_proj.weight"), std::string::npos) << e;
}

TEST(LoadModel, ShapeMismatchIsNamed) {
  std::string dir = edited_copy("shape", [](auto& t, auto&) {
    for (auto& w : t)
      if (w.name == "model.layers.0.self_attn.k_norm.weight") w.shape = {4, 4};
  });
  std::string e = error_loading(dir);
  EXPECT_NE(e.find("model.layers.0.self_attn.k_norm.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("shape"), std::string::npos) << e;
}

TEST(LoadModel, NanWeightIsNamed) {
  std::string dir = edited_copy("nan", [](auto& t, auto& v) {
    for (std::size_t i = 0; i < t.size(); ++i)
      if (t[i].name == "model.norm.weight") v[i][3] = std::nanf("");
  });
  std::string e = error_loading(dir);
  EXPECT_NE(e.find("model.norm.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("non-finite"), std::string::npos) << e;
}

TEST(LoadModel, TruncatedWeightsFileFailsCleanly) {
  std::string dir = edited_copy("trunc", [](auto&, auto&) {});
  fs::resize_file(dir + "/model.safetensors", fs::file_size(dir + "/model.safetensors") - 100);
  std::string e = error_loading(dir);
  EXPECT_NE(e.find("model.safetensors"), std::string::npos) << e;
  auto r = run_tandem("parity --model " + dir + " --tokens " + fixture("model/gqa/ids.npy") +
                      " --reference " + fixture("model/gqa/logits.npy"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("error"), std::string::npos) << r.output;
}

TEST(LoadModel, NotAModelDirectory) {
  std::string dir = temp_dir("empty_model");
  EXPECT_NE(error_loading(dir).find("neither"), std::string::npos);
  EXPECT_NE(error_loading(dir + "/nope").find("does not exist"), std::string::npos);
}

TEST(ParityCommand, JsonOutputAndThresholds) {
  const std::string d = fixture("model/window");
  const std::string base = "parity --model " + d + " --tokens " + d + "/ids.npy --reference " + d +
                           "/logits.npy --grads " + d + "/grads.safetensors --json";
  auto ok = run_tandem(base + " --max-kl 1e-6 --max-abs-diff-rel 1e-4 --max-grad-rel-l2 1e-4");
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  auto j = nlohmann::json::parse(ok.output);
  for (const char* key :
       {"max_kl", "mean_kl", "max_abs_diff", "top1_agreement", "grads", "max_grad_rel_l2"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["grads"].size(), 4u * 11 + 3);
  // An impossible threshold must fail: the command really compares.
  auto breach = run_tandem(base + " --max-kl 0 --max-abs-diff-rel 0");
  EXPECT_EQ(breach.exit_code, 2) << breach.output;
  // A reference from another model is far off.
  auto wrong = run_tandem("parity --model " + fixture("model/gqa") + " --tokens " +
                          fixture("model/gqa/ids.npy") + " --reference " + d + "/logits.npy");
  EXPECT_NE(wrong.exit_code, 0);
}

TEST(ParityCommand, TopTokenFlipsAreCountedAndLimited) {
  const std::string d = fixture("model/window");
  const std::string dir = temp_dir("parity_flips"), ours = dir + "/ours.npy";
  const std::string base = "parity --model " + d + " --tokens " + d + "/ids.npy --json";
  auto saved = run_tandem(base + " --save-logits " + ours);
  ASSERT_EQ(saved.exit_code, 0) << saved.output;
  // A reference that is our logits negated: its top token is our worst on every position, far
  // beyond a near tie.
  io::NpyArray logits = io::read_npy(ours);
  std::vector<float> negated = logits.as_f32();
  for (float& v : negated) v = -v;
  const std::string reference = dir + "/negated.npy";
  io::write_npy_f32(reference, logits.shape, negated.data());
  const std::int64_t tokens = logits.shape[0] * logits.shape[1];
  auto flipped = run_tandem(base + " --reference " + reference + " --max-top1-flips 0");
  EXPECT_EQ(flipped.exit_code, 2) << flipped.output;
  auto j = nlohmann::json::parse(flipped.output);
  EXPECT_EQ(j["top1_flips"], tokens);
  EXPECT_EQ(j["top1_near_ties"], 0);
  EXPECT_NE(j["breaches"].dump().find("top1_flips"), std::string::npos) << j.dump();
  // As many flips as allowed is not a breach; the same comparison with the fixture's reference has
  // none.
  auto allowed = run_tandem(base + " --reference " + reference + " --max-top1-flips " +
                            std::to_string(tokens));
  EXPECT_EQ(allowed.exit_code, 0) << allowed.output;
  auto same = run_tandem(base + " --reference " + d + "/logits.npy --max-top1-flips 0");
  ASSERT_EQ(same.exit_code, 0) << same.output;
  EXPECT_EQ(nlohmann::json::parse(same.output)["top1_flips"], 0);
}

}  // namespace
}  // namespace tandem
