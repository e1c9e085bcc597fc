// Every key of the job spec, declared once (docs/job-spec.md is checked against this table by a
// test). A row says where the key sits in the YAML, which field of v1::ResolvedJob holds it, its
// default, its range or allowed names, when it means something, and the line that documents it;
// the field's type comes from the proto. The YAML reader (job_spec.h), the emitter of the run
// directory's job.yaml, the checks a service makes on the resolved job it is handed
// (resolved_job.h) and the docs check all walk this table, so adding a key is one row here and
// one field in proto/strata/v1/job.proto.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <google/protobuf/descriptor.h>

#include "strata/v1/job.pb.h"

namespace strata {

// One key. Built with the chained setters below, so that a row reads as a sentence.
struct JobKey {
  // Dotted YAML path ("training.lr"); a key of each item of a list of mappings is written
  // "cluster.stragglers[].worker".
  std::string path;
  // The v1::ResolvedJob field that holds it, dotted from the message's root; the path if empty.
  std::string field;
  // The default as YAML text ("0.1", "fashion-mnist", "[]"); empty with `required` unset: the
  // empty string (a string key) or nothing to set (a list).
  std::string default_yaml;
  bool required = false;  // list items only: the key must be given
  // Numbers: the range (each element's, for a list of numbers).
  std::optional<double> min, max;
  bool min_open = false, max_open = false;
  std::string unit;  // "cores", "seconds": said after the range in messages
  // Enums: the spellings accepted, in the order messages list them; empty: every value.
  std::vector<std::string> allowed;
  // A check beyond type and range on one value (`text` as written, `number` for numbers): ""
  // or what is wrong ("must be 1 to 63 characters").
  std::string (*check)(const std::string& text, double number) = nullptr;
  // When the key means something: "" if it does for `job`, else why not, as the refusal of a key
  // given where it means nothing ("applies to ... only"). `applies_inputs` are the keys it reads:
  // when one of them was refused, nothing is said.
  std::string (*applies)(const v1::ResolvedJob& job) = nullptr;
  std::vector<std::string> applies_inputs;
  // The emitter leaves the key out where it does not apply, or when it holds its default, so
  // that the job.yaml of a job that does not use a key reads as it did before the key existed.
  bool emit_only_where_applies = false;
  bool emit_only_unless_default = false;
  bool flow = false;  // lists: written [a, b] on one line
  // docs/job-spec.md: the type column (made from the type and the range when empty) and the
  // first sentence of the meaning column.
  std::string type_doc;
  std::string doc;

  // Filled in when the table is built: the field chain from v1::ResolvedJob to the value (a
  // repeated message on the way is the list the item belongs to).
  std::vector<const google::protobuf::FieldDescriptor*> chain;

  JobKey& Field(std::string f) {
    field = std::move(f);
    return *this;
  }
  JobKey& Default(std::string yaml) {
    default_yaml = std::move(yaml);
    return *this;
  }
  JobKey& Required() {
    required = true;
    return *this;
  }
  JobKey& AtLeast(double v) {
    min = v;
    return *this;
  }
  JobKey& Above(double v) {
    min = v;
    min_open = true;
    return *this;
  }
  JobKey& AtMost(double v) {
    max = v;
    return *this;
  }
  JobKey& Below(double v) {
    max = v;
    max_open = true;
    return *this;
  }
  JobKey& Unit(std::string u) {
    unit = std::move(u);
    return *this;
  }
  JobKey& Allowed(std::vector<std::string> names) {
    allowed = std::move(names);
    return *this;
  }
  JobKey& Check(std::string (*f)(const std::string&, double)) {
    check = f;
    return *this;
  }
  JobKey& Applies(std::string (*f)(const v1::ResolvedJob&), std::vector<std::string> inputs) {
    applies = f;
    applies_inputs = std::move(inputs);
    return *this;
  }
  JobKey& EmitOnlyWhereApplies() {
    emit_only_where_applies = true;
    return *this;
  }
  JobKey& EmitOnlyUnlessDefault() {
    emit_only_unless_default = true;
    return *this;
  }
  JobKey& Flow() {
    flow = true;
    return *this;
  }
  JobKey& TypeDoc(std::string t) {
    type_doc = std::move(t);
    return *this;
  }
  JobKey& Doc(std::string d) {
    doc = std::move(d);
    return *this;
  }

  const google::protobuf::FieldDescriptor* leaf() const { return chain.back(); }
  // "cluster.stragglers" for an item key, "" otherwise.
  std::string ListPath() const;
  // The key's name inside its section or list item ("lr", "worker").
  std::string Name() const;
  // The enclosing section ("training.lr_schedule"; "" at the top level; the list for an item).
  std::string Section() const;
  bool IsListItem() const { return !ListPath().empty(); }
  // A list of mappings ("cluster.stragglers"), whose items have keys of their own.
  bool IsListOfMappings() const;
  bool IsNumber() const;
  // The range as messages say it: ">= 1", "> 0", "in [0, 1)", "in [0, 64] cores"; "" for none.
  std::string RangeText() const;
  // The docs' type and default columns.
  std::string TypeText() const;
  std::string DefaultText() const;
};

// The table, in the order job.yaml is written and docs/job-spec.md lists the keys.
const std::vector<JobKey>& JobKeys();
const JobKey* FindJobKey(const std::string& path);

// Sections written in flow style ({a: 1, b: 2}) in job.yaml.
bool IsFlowSection(const std::string& section);

// The spec's spelling of an enum value ("fashion-mnist"), from the proto's `spelled` option; ""
// for a value without one (the UNSPECIFIED zero).
std::string Spelled(const google::protobuf::EnumValueDescriptor* value);
template <typename Enum>
std::string Spelled(Enum value) {
  const auto* d = google::protobuf::GetEnumDescriptor<Enum>()->FindValueByNumber(value);
  return d == nullptr ? std::string("(unknown ") + std::to_string(static_cast<int>(value)) + ")"
                      : Spelled(d);
}
// The value of `type` spelled `text`, or nullptr.
const google::protobuf::EnumValueDescriptor* EnumBySpelling(
    const google::protobuf::EnumDescriptor* type, const std::string& text);
template <typename Enum>
std::optional<Enum> EnumFromSpelling(const std::string& text) {
  const auto* d = EnumBySpelling(google::protobuf::GetEnumDescriptor<Enum>(), text);
  if (d == nullptr) return std::nullopt;
  return static_cast<Enum>(d->number());
}
// Every spelling of `type`'s values, for messages: "random, mod, stratified".
std::string Spellings(const google::protobuf::EnumDescriptor* type);
template <typename Enum>
std::string Spellings() {
  return Spellings(google::protobuf::GetEnumDescriptor<Enum>());
}

}  // namespace strata
