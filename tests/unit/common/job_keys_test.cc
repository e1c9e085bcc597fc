// The one table of job keys (services/common/config/job_keys.h): its rows are consistent with
// themselves and with job.proto, and docs/job-spec.md documents exactly these keys, with the
// types, defaults and first sentences the table gives (a key added to the table and not to the
// docs, or documented with another default, fails here: with training.epochs' default changed to
// 11 in the table and not in the docs, TheDocsDocumentEveryKeyAsTheTableDeclaresIt failed naming
// the default column of training.epochs).
#include "services/common/config/job_keys.h"

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <absl/strings/str_split.h>
#include <absl/strings/strip.h>

#include "services/common/config/job_spec.h"
#include "services/common/config/resolved_job.h"

namespace strata {
namespace {

using google::protobuf::FieldDescriptor;

TEST(JobKeys, EveryKeyOnceAndEveryDefaultPassesItsOwnChecks) {
  std::set<std::string> paths;
  for (const JobKey& key : JobKeys()) {
    EXPECT_TRUE(paths.insert(key.path).second) << key.path << " declared twice";
    EXPECT_FALSE(key.doc.empty()) << key.path << " has no doc line";
    EXPECT_TRUE(key.doc.back() == '.' || key.doc.back() == ')') << key.path << ": " << key.doc;
    if (key.applies != nullptr) {
      EXPECT_FALSE(key.applies_inputs.empty()) << key.path;
      for (const std::string& input : key.applies_inputs) {
        EXPECT_NE(FindJobKey(input), nullptr) << key.path << " reads " << input;
      }
    }
  }
  // The defaults are a job every service accepts.
  EXPECT_THAT(ResolvedJobProblems(DefaultJob()), ::testing::IsEmpty());
}

TEST(JobKeys, EveryFieldOfTheResolvedJobIsAKeyOrDerived) {
  // What the services read and no YAML key sets: computed from the keys, once (Derive).
  const std::set<std::string> derived = {"format", "training.worker_batch",
                                         "strategy.server_lr_scale", "strategy.round_points",
                                         "strategy.bucket_bytes"};
  std::set<std::string> keyed;
  for (const JobKey& key : JobKeys()) {
    std::string field;
    for (const FieldDescriptor* f : key.chain) field += (field.empty() ? "" : ".") + f->name();
    keyed.insert(field);
  }
  std::vector<std::string> missing;
  std::function<void(const google::protobuf::Descriptor*, const std::string&)> walk =
      [&](const google::protobuf::Descriptor* d, const std::string& prefix) {
        for (int i = 0; i < d->field_count(); ++i) {
          const FieldDescriptor* f = d->field(i);
          const std::string path = prefix.empty() ? f->name() : prefix + "." + f->name();
          if (keyed.count(path) || derived.count(path)) continue;
          if (f->message_type() != nullptr) {
            walk(f->message_type(), path);
          } else {
            missing.push_back(path);
          }
        }
      };
  walk(v1::ResolvedJob::descriptor(), "");
  EXPECT_THAT(missing, ::testing::IsEmpty()) << "fields no key of the table sets";
}

TEST(JobKeys, EveryEnumValueIsSpelledOnceExceptTheUnspecifiedZero) {
  for (const JobKey& key : JobKeys()) {
    if (key.leaf()->cpp_type() != FieldDescriptor::CPPTYPE_ENUM) continue;
    const auto* e = key.leaf()->enum_type();
    std::set<std::string> spellings;
    for (int i = 0; i < e->value_count(); ++i) {
      const std::string s = Spelled(e->value(i));
      if (e->value(i)->number() == 0) {
        EXPECT_TRUE(s.empty()) << e->value(i)->full_name();
        continue;
      }
      EXPECT_FALSE(s.empty()) << e->value(i)->full_name() << " has no spelling";
      EXPECT_TRUE(spellings.insert(s).second) << s << " spelled twice in " << e->full_name();
      EXPECT_EQ(EnumBySpelling(e, s), e->value(i));
    }
    for (const std::string& allowed : key.allowed) {
      EXPECT_TRUE(spellings.count(allowed)) << key.path << " allows unknown '" << allowed << "'";
    }
  }
}

// One row of a key table in docs/job-spec.md: "| `key` | type | default | meaning |".
struct DocRow {
  std::string key, type, default_text, meaning;
};

std::vector<DocRow> DocRows() {
  std::ifstream in(std::string(STRATA_TEST_SOURCE_DIR) + "/docs/job-spec.md");
  EXPECT_TRUE(in.good()) << "docs/job-spec.md";
  std::vector<DocRow> rows;
  std::string line;
  while (std::getline(in, line)) {
    if (!absl::StartsWith(line, "| `")) continue;
    std::vector<std::string> cells = absl::StrSplit(line, " | ");
    if (cells.size() < 4) continue;
    DocRow row;
    row.key = std::string(absl::StripSuffix(absl::StripPrefix(cells[0], "| `"), "`"));
    row.type = cells[1];
    row.default_text = cells[2];
    std::string meaning = cells[3];
    for (size_t i = 4; i < cells.size(); ++i) meaning += " | " + cells[i];
    row.meaning = std::string(absl::StripSuffix(meaning, " |"));
    rows.push_back(row);
  }
  return rows;
}

TEST(JobKeys, TheDocsDocumentEveryKeyAsTheTableDeclaresIt) {
  const std::vector<DocRow> rows = DocRows();
  std::vector<std::string> documented, declared;
  for (const DocRow& row : rows) documented.push_back(row.key);
  for (const JobKey& key : JobKeys()) declared.push_back(key.path);
  // Same keys, same order: the order job.yaml is written in.
  ASSERT_EQ(documented, declared) << "docs/job-spec.md's key rows against JobKeys()";
  for (size_t i = 0; i < rows.size(); ++i) {
    const JobKey& key = JobKeys()[i];
    EXPECT_EQ(rows[i].type, key.TypeText()) << key.path << ": the type column";
    EXPECT_EQ(rows[i].default_text, key.DefaultText()) << key.path << ": the default column";
    EXPECT_TRUE(absl::StartsWith(rows[i].meaning, key.doc))
        << key.path << ": the meaning column should start with the table's doc line\n  " << key.doc
        << "\nbut is\n  " << rows[i].meaning;
  }
}

TEST(JobKeys, TheDefaultJobIsWrittenAndReadBackUnchanged) {
  const v1::ResolvedJob defaults = DefaultJob();
  auto again = ParseJobSpec(JobSpecYaml(defaults), "job.yaml");
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << JobSpecYaml(defaults);
  EXPECT_EQ(again->SerializeAsString(), defaults.SerializeAsString());
}

}  // namespace
}  // namespace strata
