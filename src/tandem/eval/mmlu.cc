#include "tandem/eval/mmlu.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <utility>

#include "tandem/core/error.h"
#include "tandem/core/utf8.h"
#include "tandem/io/arrow_stream.h"

namespace tandem::eval {
namespace {

// MMLU._subcategories (subject -> subcategory) in olmo-eval's order.
const std::vector<std::pair<const char*, const char*>> kSubjects = {
    {"abstract_algebra", "math"},
    {"anatomy", "health"},
    {"astronomy", "physics"},
    {"business_ethics", "business"},
    {"clinical_knowledge", "health"},
    {"college_biology", "biology"},
    {"college_chemistry", "chemistry"},
    {"college_computer_science", "computer science"},
    {"college_mathematics", "math"},
    {"college_medicine", "health"},
    {"college_physics", "physics"},
    {"computer_security", "computer science"},
    {"conceptual_physics", "physics"},
    {"econometrics", "economics"},
    {"electrical_engineering", "engineering"},
    {"elementary_mathematics", "math"},
    {"formal_logic", "philosophy"},
    {"global_facts", "other"},
    {"high_school_biology", "biology"},
    {"high_school_chemistry", "chemistry"},
    {"high_school_computer_science", "computer science"},
    {"high_school_european_history", "history"},
    {"high_school_geography", "geography"},
    {"high_school_government_and_politics", "politics"},
    {"high_school_macroeconomics", "economics"},
    {"high_school_mathematics", "math"},
    {"high_school_microeconomics", "economics"},
    {"high_school_physics", "physics"},
    {"high_school_psychology", "psychology"},
    {"high_school_statistics", "math"},
    {"high_school_us_history", "history"},
    {"high_school_world_history", "history"},
    {"human_aging", "health"},
    {"human_sexuality", "culture"},
    {"international_law", "law"},
    {"jurisprudence", "law"},
    {"logical_fallacies", "philosophy"},
    {"machine_learning", "computer science"},
    {"management", "business"},
    {"marketing", "business"},
    {"medical_genetics", "health"},
    {"miscellaneous", "other"},
    {"moral_disputes", "philosophy"},
    {"moral_scenarios", "philosophy"},
    {"nutrition", "health"},
    {"philosophy", "philosophy"},
    {"prehistory", "history"},
    {"professional_accounting", "other"},
    {"professional_law", "law"},
    {"professional_medicine", "health"},
    {"professional_psychology", "psychology"},
    {"public_relations", "politics"},
    {"security_studies", "politics"},
    {"sociology", "culture"},
    {"us_foreign_policy", "politics"},
    {"virology", "health"},
    {"world_religions", "philosophy"},
};

// MMLU._categories.
const std::vector<std::pair<const char*, std::vector<const char*>>> kCategories = {
    {"stem", {"physics", "chemistry", "biology", "computer science", "math", "engineering"}},
    {"humanities", {"history", "philosophy", "law"}},
    {"social_sciences", {"politics", "culture", "economics", "geography", "psychology"}},
    {"other", {"other", "business", "health"}},
};

constexpr int kShots = 5;  // prompt "inst+5"
const char* const kKeys[] = {"A", "B", "C", "D"};

struct Question {
  std::string question, subject;
  std::vector<std::string> choices;
  std::int64_t answer = 0;
};

std::vector<Question> read_split(const std::string& dir) {
  io::ArrowTable t = io::read_hf_dataset_dir(dir);
  const auto& q = t.column("question", io::ArrowColumn::Kind::kString).strings;
  const auto& s = t.column("subject", io::ArrowColumn::Kind::kString).strings;
  const auto& c = t.column("choices", io::ArrowColumn::Kind::kStringList).lists;
  const auto& a = t.column("answer", io::ArrowColumn::Kind::kInt).ints;
  std::vector<Question> out;
  for (std::int64_t i = 0; i < t.num_rows; ++i) {
    const auto k = static_cast<std::size_t>(i);
    TANDEM_CHECK(a[k] >= 0 && static_cast<std::size_t>(a[k]) < c[k].size(),
                 "{}: row {}: answer {} outside its {} choices", dir, i, a[k], c[k].size());
    out.push_back({q[k], s[k], c[k], a[k]});
  }
  return out;
}

std::string format_example(const Question& q, bool mc_labels) {
  std::string text = (mc_labels ? "" : "Question: ") + python_strip(q.question) + "\n";
  if (mc_labels) {
    // zip(keys, choices): at most four.
    for (std::size_t i = 0; i < q.choices.size() && i < 4; ++i) {
      text += std::string(kKeys[i]) + ". " + q.choices[i] + "\n";
    }
  }
  return text + "Answer:";
}

// The code point at text[i] (valid UTF-8: Arrow strings are); advances i past it.
char32_t next_code_point(const std::string& text, std::size_t& i) {
  const auto lead = static_cast<unsigned char>(text[i]);
  const std::size_t n = std::min(core::utf8::sequence_length(lead), text.size() - i);
  char32_t cp = n == 1 ? lead : (lead & (0x7F >> n));
  for (std::size_t k = 1; k < n; ++k) {
    cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
  }
  i += n;
  return cp;
}

bool python_isspace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

}  // namespace

std::string python_strip(const std::string& text) {
  std::size_t begin = 0, end = text.size();
  while (begin < end) {
    std::size_t i = begin;
    if (!python_isspace(next_code_point(text, i))) break;
    begin = i;
  }
  // From the back: find the start of the last code point.
  while (end > begin) {
    std::size_t start = end - 1;
    while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    std::size_t i = start;
    if (!python_isspace(next_code_point(text, i))) break;
    end = start;
  }
  return text.substr(begin, end - begin);
}

std::vector<std::string> mmlu_subjects(const std::string& category) {
  for (const auto& [name, subcats] : kCategories) {
    if (category != name) continue;
    std::vector<std::string> subjects;
    for (const char* sub : subcats) {
      for (const auto& [subject, cat] : kSubjects) {
        if (std::string(cat) == sub) subjects.emplace_back(subject);
      }
    }
    return subjects;
  }
  core::fail("MMLU category '{}' unknown (stem, humanities, social_sciences, other)", category);
}

std::vector<DownstreamRequest> build_mmlu_requests(const std::string& hf_datasets_dir,
                                                   const MmluOptions& options,
                                                   std::int64_t limit_docs) {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(hf_datasets_dir) / "hails" / "mmlu_no_train";
  TANDEM_CHECK(fs::is_directory(root),
               "MMLU data {} not found (run scripts/fetch_eval_data.sh, or set --hf-datasets-dir)",
               root.string());
  std::vector<DownstreamRequest> requests;
  std::int64_t doc_id = 0;
  for (const auto& subject : mmlu_subjects(options.category)) {
    std::vector<Question> dev = read_split((root / subject / "dev").string());
    std::vector<Question> docs = read_split((root / subject / options.split).string());
    for (const Question& doc : docs) {
      if (limit_docs > 0 && doc_id >= limit_docs) return requests;
      // The few-shot prefix uses the dev set of the document's own "subject" field.
      std::string topic = doc.subject;
      for (char& c : topic) {
        if (c == '_') c = ' ';
      }
      std::string prefix =
          "The following are multiple choice questions (with answers) about " + topic + ":\n\n";
      TANDEM_CHECK(doc.subject == subject, "{}: a '{}' question in the '{}' folder",
                   (root / subject / options.split).string(), doc.subject, subject);
      for (int k = 0; k < kShots && k < static_cast<int>(dev.size()); ++k) {
        const Question& d = dev[static_cast<std::size_t>(k)];
        std::string answer =
            options.mc_labels ? kKeys[d.answer] : d.choices[static_cast<std::size_t>(d.answer)];
        prefix += format_example(d, options.mc_labels) + " " + answer + "\n\n";
      }
      const std::string context = prefix + format_example(doc, options.mc_labels);
      std::vector<std::string> continuations;
      if (options.mc_labels) {
        for (const char* k : kKeys) continuations.push_back(std::string(" ") + k);
      } else {
        for (const auto& c : doc.choices) continuations.push_back(" " + c);
      }
      if (options.gold_only) {
        continuations = {continuations.at(static_cast<std::size_t>(doc.answer))};
      }
      for (std::size_t i = 0; i < continuations.size(); ++i) {
        DownstreamRequest r;
        r.doc_id = doc_id;
        r.cont_id = static_cast<std::int64_t>(i);
        r.label = options.gold_only ? 0 : doc.answer;
        r.context = context;
        r.continuation = continuations[i];
        requests.push_back(std::move(r));
      }
      ++doc_id;
    }
  }
  return requests;
}

}  // namespace tandem::eval
