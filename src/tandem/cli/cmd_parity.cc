// `tandem parity`: runs a model on token ids and compares logits (and optionally gradients) with
// a reference, printing one JSON object with --json; a breached threshold exits non-zero.
// --save-logits writes tandem's own logits as a .npy, so a third party can redo the comparison;
// --intra-doc-eos applies OLMo-core's intra-document masking (documents end at that EOS id);
// --backend runs the model on the CPU (default) or the GPU (tools/gpu_hf_parity.py compares the
// GPU's logits and gradients with HF transformers' on the same GPU).
#include <fmt/format.h>

#include <optional>

#include "tandem/cli/commands.h"
#include "tandem/core/error.h"
#include "tandem/eval/parity.h"
#include "tandem/io/npy.h"
#include "tandem/kernels/backend.h"
#include "tandem/model/documents.h"
#include "tandem/model/model_io.h"

namespace tandem::cli {
namespace {

struct ParityArgs {
  std::string model, tokens, reference, grads, save_logits, precision = "fp32", backend = "cpu";
  std::optional<std::int64_t> doc_eos, doc_bos;
  bool json = false;
  std::optional<double> max_kl, max_mean_kl, max_abs_diff_rel, max_grad_rel_l2, min_top1;
  std::optional<std::int64_t> max_top1_flips;
};

int run_parity(const ParityArgs& a) {
  TANDEM_CHECK(!a.reference.empty() || !a.save_logits.empty(),
               "parity: give --reference LOGITS.npy to compare with, --save-logits FILE, or both");
  TANDEM_CHECK(!a.doc_bos || a.doc_eos, "parity: --intra-doc-bos needs --intra-doc-eos");
  std::unique_ptr<kernels::Backend> backend = kernels::make_backend(a.backend);
  auto model = model::load_model(a.model, *backend);
  model->set_precision(model::parse_precision(a.precision));
  io::NpyArray ids_arr = io::read_npy(a.tokens);
  TANDEM_CHECK(ids_arr.shape.size() == 2, "{}: token ids must be [B, T], got {} dims", a.tokens,
               ids_arr.shape.size());
  const std::int64_t B = ids_arr.shape[0], T = ids_arr.shape[1];
  std::vector<std::int64_t> ids = ids_arr.as_i64();
  for (std::size_t i = 0; i < ids.size(); ++i)
    TANDEM_CHECK(ids[i] >= 0 && ids[i] < model->config().vocab_size,
                 "{}: token id {} at position {} is outside the vocabulary [0, {})", a.tokens,
                 ids[i], i, model->config().vocab_size);
  TANDEM_CHECK(B > 0 && T > 0, "{}: token ids of shape [{}, {}] hold no tokens", a.tokens, B, T);
  std::vector<std::int64_t> doc_start;
  if (a.doc_eos) doc_start = model::document_starts(ids.data(), B, T, *a.doc_eos, a.doc_bos);
  const std::int64_t* docs = a.doc_eos ? doc_start.data() : nullptr;
  const std::int64_t V = model->config().embedding_size;
  std::vector<float> logits(static_cast<std::size_t>(B * T * V));
  model->forward_logits(ids.data(), B, T, logits.data(), docs);
  if (!a.save_logits.empty()) {
    io::write_npy_f32(a.save_logits, {B, T, V}, logits.data());
    if (!a.json) fmt::print("wrote logits [{}, {}, {}] float32 to {}\n", B, T, V, a.save_logits);
  }
  if (a.reference.empty()) {
    if (a.json)
      fmt::print("{}\n",
                 nlohmann::json{{"saved_logits", a.save_logits}, {"shape", {B, T, V}}}.dump());
    return 0;
  }
  io::NpyArray ref_arr = io::read_npy(a.reference);
  TANDEM_CHECK(ref_arr.shape.size() == 3 && ref_arr.shape[0] == B && ref_arr.shape[1] == T,
               "{}: reference logits must be [{}, {}, V]", a.reference, B, T);
  // V is the model's vocabulary, or its padded embedding size: fewer columns would leave
  // tokens out of the comparison.
  const std::int64_t ref_vocab = ref_arr.shape[2];
  TANDEM_CHECK(
      ref_vocab == model->config().vocab_size || ref_vocab == model->config().embedding_size,
      "{}: reference logits have {} columns; the model's vocabulary is {} (padded {})", a.reference,
      ref_vocab, model->config().vocab_size, model->config().embedding_size);
  eval::LogitParity p = eval::compare_logits(logits, V, ref_arr.as_f32(), ref_arr.shape[2]);
  std::optional<eval::GradParity> g;
  if (!a.grads.empty()) g = eval::compare_gradients(*model, ids, B, T, a.grads, docs);

  nlohmann::json j = eval::parity_to_json(p, g);
  std::vector<std::string> breaches;
  auto check = [&](const std::optional<double>& limit, double value, const char* what, bool max) {
    if (limit && (max ? value > *limit : value < *limit))
      breaches.push_back(
          fmt::format("{} = {:.3e} {} {:.3e}", what, value, max ? ">" : "<", *limit));
  };
  check(a.max_kl, p.max_kl, "max_kl", true);
  check(a.max_mean_kl, p.mean_kl, "mean_kl", true);
  check(a.max_abs_diff_rel, p.max_abs_diff / std::max(p.max_ref_abs, 1e-30),
        "max_abs_diff / max|ref|", true);
  check(a.min_top1, p.top1_agreement, "top1_agreement", false);
  if (a.max_top1_flips && p.top1_flips > *a.max_top1_flips)
    breaches.push_back(fmt::format("top1_flips = {} > {} (top tokens differing beyond a near tie)",
                                   p.top1_flips, *a.max_top1_flips));
  if (g) check(a.max_grad_rel_l2, g->max_rel_l2, "max_grad_rel_l2", true);
  if (!a.save_logits.empty()) j["saved_logits"] = a.save_logits;
  if (a.doc_eos) j["intra_doc_eos"] = *a.doc_eos;
  j["precision"] = a.precision;
  j["backend"] = backend->describe();
  j["pass"] = breaches.empty();
  j["breaches"] = breaches;
  if (a.json) {
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("tokens {}  vocab compared {}\n", p.tokens, p.vocab_compared);
    fmt::print(
        "max KL {:.3e}  mean KL {:.3e}  max |dlogit| {:.3e} (max |ref| {:.3f})  top-1 {:.4f} "
        "({} differing at a near tie, {} beyond)\n",
        p.max_kl, p.mean_kl, p.max_abs_diff, p.max_ref_abs, p.top1_agreement, p.top1_near_ties,
        p.top1_flips);
    if (g)
      fmt::print("max gradient relative L2 error {:.3e} over {} tensors\n", g->max_rel_l2,
                 g->rel_l2.size());
    for (const auto& b : breaches) fmt::print("BREACH: {}\n", b);
    fmt::print("{}\n", breaches.empty() ? "parity: PASS" : "parity: FAIL");
  }
  return breaches.empty() ? 0 : 2;
}

}  // namespace

void add_parity_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<ParityArgs>();
  CLI::App* cmd =
      app.add_subcommand("parity", "Compare the model's logits/gradients with a reference");
  cmd->add_option("--model", args->model, "HF model directory or tandem model/checkpoint directory")
      ->required();
  cmd->add_option("--tokens", args->tokens, "Token ids, .npy [B, T]")->required();
  cmd->add_option("--reference", args->reference, "Reference logits, .npy [B, T, V]");
  cmd->add_option("--save-logits", args->save_logits,
                  "Write the model's logits to this .npy (float32 [B, T, embedding rows])");
  cmd->add_option("--intra-doc-eos", args->doc_eos,
                  "Intra-document masking: documents end at this EOS id (OLMo-core's doc_lens)");
  cmd->add_option(
      "--intra-doc-bos", args->doc_bos,
      "With --intra-doc-eos: a document ends only where EOS is followed by this BOS id");
  cmd->add_option("--grads", args->grads,
                  "Reference gradients (.safetensors, HF names) of HF's mean next-token CE");
  cmd->add_option("--precision", args->precision,
                  "fp32 (default) or bf16: the mixed-precision policy of docs/precision.md");
  cmd->add_option("--backend", args->backend, "cpu (default) or cuda: where the model runs");
  cmd->add_flag("--json", args->json, "Print one JSON object");
  cmd->add_option("--max-kl", args->max_kl, "Fail if the max per-token KL exceeds this");
  cmd->add_option("--max-mean-kl", args->max_mean_kl, "Fail if the mean per-token KL exceeds this");
  cmd->add_option("--max-abs-diff-rel", args->max_abs_diff_rel,
                  "Fail if max |logit diff| / max |ref logit| exceeds this");
  cmd->add_option("--min-top1", args->min_top1, "Fail if top-1 agreement is below this");
  cmd->add_option("--max-top1-flips", args->max_top1_flips,
                  fmt::format("Fail if more than this many top tokens differ where the "
                              "reference's two logits are more than {} of its largest |logit| "
                              "apart (closer is a near tie)",
                              eval::kTop1TieMargin));
  cmd->add_option("--max-grad-rel-l2", args->max_grad_rel_l2,
                  "Fail if any gradient's relative L2 error exceeds this");
  cmd->callback([args, &exit_code] { exit_code = run_parity(*args); });
}

}  // namespace tandem::cli
