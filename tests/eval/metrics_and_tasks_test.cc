// Metric semantics on hand-made scores, task loading and bad input.
#include <gtest/gtest.h>
#include <zlib.h>

#include "eval_test_util.h"
#include "tandem/core/error.h"
#include "tandem/eval/downstream.h"

namespace tandem::eval {
namespace {

TEST(DownstreamMetrics, AccuracyVariantsAndBpb) {
  // Doc 0: choice 1 has the best raw sum, choice 0 the best per character.
  std::vector<ScoredRequest> s = {
      {0, 0, 0, -4.0, 2, 8, 8},  // -0.5 / char
      {0, 1, 0, -3.0, 3, 3, 3},  // -1.0 / char
      {1, 0, 1, -2.0, 1, 2, 2},
      {1, 1, 1, -1.0, 1, 2, 4},
  };
  auto m = compute_downstream_metrics(s, false);
  EXPECT_DOUBLE_EQ(m.at("acc"), 0.5);            // doc0 wrong, doc1 right
  EXPECT_DOUBLE_EQ(m.at("acc_per_char"), 1.0);   // doc0 right per char
  EXPECT_DOUBLE_EQ(m.at("acc_per_token"), 0.5);  // doc0: -3/3 > -4/2 picks choice 1 (wrong)
  // bpb of the gold continuations: doc0 4/8*log2e, doc1 1/4*log2e.
  EXPECT_NEAR(m.at("bpb"), (4.0 / 8 + 1.0 / 4) / 2 * kLog2OfE, 1e-6);
  EXPECT_NEAR(m.at("ce_loss"), (4.0 / 8 + 1.0 / 2) / 2, 1e-6);
}

TEST(DownstreamMetrics, TiesPickTheFirstChoiceAndGapsSkipTheDocument) {
  std::vector<ScoredRequest> s = {
      {0, 0, 1, -1.0, 1, 1, 1},
      {0, 1, 1, -1.0, 1, 1, 1},  // tie -> choice 0 (wrong)
      {1, 0, 0, -1.0, 1, 1, 1},
      {1, 2, 0, -2.0, 1, 1, 1},  // cont_id 2 of 2 choices: skipped
  };
  auto m = compute_downstream_metrics(s, false);
  EXPECT_DOUBLE_EQ(m.at("acc"), 0.0);
}

TEST(DownstreamMetrics, CharactersAreCodePoints) {
  EXPECT_EQ(utf8_code_points(" caf\xc3\xa9"), 5);
  EXPECT_EQ(utf8_code_points("\xe2\x82\xac"), 1);
}

TEST(TaskSpec, Variants) {
  auto rc = parse_task_spec("arc_easy:rc");
  EXPECT_EQ(rc.variant_dir, "rc_5shot");
  EXPECT_FALSE(rc.bpb);
  auto bpb = parse_task_spec("piqa:bpb");
  EXPECT_EQ(bpb.variant_dir, "rc_5shot");
  EXPECT_TRUE(bpb.bpb);
  auto z = parse_task_spec("csqa:rc_0shot_bpb");
  EXPECT_EQ(z.variant_dir, "rc_0shot");
  EXPECT_TRUE(z.bpb);
  EXPECT_EQ(default_task_specs().size(), 30u);
  EXPECT_THROW(parse_task_spec("arc_easy"), core::Error);
  EXPECT_THROW(parse_task_spec("a:b:c"), core::Error);
  EXPECT_THROW(parse_task_spec("../x:rc"), core::Error);
}

TEST(TaskLoading, LimitKeepsWholeDocumentsAndDropsUnconditional) {
  auto task = load_task(test::tasks_dir(), parse_task_spec("arc_easy:rc"), 2);
  EXPECT_EQ(task.documents, 2);
  EXPECT_EQ(task.requests.size(), 8u);  // 4 choices each, unconditional lines dropped
  for (const auto& r : task.requests) EXPECT_LT(r.doc_id, 1000000);
  auto bpb = load_task(test::tasks_dir(), parse_task_spec("piqa:bpb"));
  EXPECT_EQ(bpb.requests.size(), static_cast<std::size_t>(bpb.documents));
}

void expect_error(const std::function<void()>& fn, const std::string& fragment) {
  try {
    fn();
    FAIL() << "no error; expected one containing: " << fragment;
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(TaskBadInput, MissingTaskNamesIt) {
  expect_error([] { load_task(test::tasks_dir(), parse_task_spec("no_such_task:rc")); },
               "no task 'no_such_task'");
  expect_error([] { load_task(test::tasks_dir(), parse_task_spec("arc_easy:rc_9shot")); },
               "no variant folder");
  expect_error([] { load_task("/nonexistent/tasks", parse_task_spec("arc_easy:rc")); },
               "run scripts/fetch_eval_data.sh");
}

TEST(TaskBadInput, MalformedRequestLineNamesFileAndLine) {
  std::string dir = test::scratch_dir("bad_requests");
  std::string good =
      R"({"request_type":"loglikelihood","request":{"context":"Q","continuation":" A"},)"
      R"("idx":0,"label":0,"doc_id":0})";
  test::write_text(dir + "/t/rc_5shot/requests.jsonl", good + "\n{not json\n");
  test::write_text(dir + "/t/rc_5shot/config.json",
                   R"({"task_config":{"primary_metric":"acc_raw"}})");
  expect_error([&] { load_task(dir, parse_task_spec("t:rc")); }, "requests.jsonl: line 2");
  test::write_text(dir + "/t/rc_5shot/requests.jsonl",
                   good + "\n" + R"({"request":{"context":"Q"},"idx":0,"label":0,"doc_id":1})");
  expect_error([&] { load_task(dir, parse_task_spec("t:rc")); }, "line 2");
  test::write_text(dir + "/t/rc_5shot/requests.jsonl", good + "\n");
  test::write_text(dir + "/t/rc_5shot/config.json", R"({"task_config":{"primary_metric":"f1"}})");
  expect_error([&] { load_task(dir, parse_task_spec("t:rc")); }, "primary metric \"f1\"");
  // gzip with a malformed line
  gzFile gz = gzopen((dir + "/t/mc_5shot/requests.jsonl.gz").c_str(), "wb");
  if (gz == nullptr) {
    std::filesystem::create_directories(dir + "/t/mc_5shot");
    gz = gzopen((dir + "/t/mc_5shot/requests.jsonl.gz").c_str(), "wb");
  }
  ASSERT_NE(gz, nullptr);
  std::string body =
      good + "\n" +
      R"({"request":{"context":"Q","continuation":" A"},"idx":"x","label":0,"doc_id":1})" + "\n";
  gzwrite(gz, body.data(), static_cast<unsigned>(body.size()));
  gzclose(gz);
  test::write_text(dir + "/t/mc_5shot/config.json",
                   R"({"task_config":{"primary_metric":"acc_raw"}})");
  expect_error([&] { load_task(dir, parse_task_spec("t:mc")); }, "requests.jsonl.gz: line 2");
  std::filesystem::remove_all(dir);
}

TEST(DownstreamConfigYaml, StrictKeys) {
  YAML::Node ok = YAML::Load("{tasks: [arc_easy:rc, piqa:bpb], limit: 5, interval: 10}");
  auto c = parse_downstream_config(io::ConfigSection(ok, "evaluation.downstream", "run.yaml"));
  EXPECT_EQ(c.tasks.size(), 2u);
  EXPECT_EQ(c.options.limit, 5);
  EXPECT_EQ(c.interval, 10);
  YAML::Node all = YAML::Load("{tasks: default}");
  EXPECT_EQ(parse_downstream_config(io::ConfigSection(all, "evaluation.downstream")).tasks.size(),
            30u);
  YAML::Node typo = YAML::Load("{tasks: [arc_easy:rc], limt: 5}");
  expect_error(
      [&] {
        parse_downstream_config(io::ConfigSection(typo, "evaluation.downstream", "run.yaml"));
      },
      "limt");
  YAML::Node bad = YAML::Load("{tasks: [arc_easy]}");
  expect_error(
      [&] { parse_downstream_config(io::ConfigSection(bad, "evaluation.downstream", "run.yaml")); },
      "TASK:VARIANT");
}

}  // namespace
}  // namespace tandem::eval
