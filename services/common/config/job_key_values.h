// The value of one job key between YAML and v1::ResolvedJob: decoded from a YAML scalar by the
// key's field type (numbers finite, strings free of control characters, an enum only by one of
// its allowed spellings), checked against the key's range, and stored into the job through
// protobuf reflection at the place the key's field chain names. The job-spec reader, the table's
// defaults and the emitter all go through these, so that a key behaves the same wherever it is
// read or written.
#pragma once

#include <string>

#include <google/protobuf/message.h>
#include <yaml-cpp/yaml.h>

#include "services/common/config/job_keys.h"

namespace strata {

// A value as YAML gave it: its text, and its number for numeric fields.
struct KeyValue {
  std::string text;
  double number = 0;
  const google::protobuf::EnumValueDescriptor* enum_value = nullptr;
};

// What a value of the field's type is called in messages: "a number", "true or false", ...
const char* KeyTypeName(const google::protobuf::FieldDescriptor* f);

// Decodes `node` as a value of `key`'s field: "" or the problem (type, finiteness, control
// characters, an enum spelling not allowed).
std::string DecodeKeyValue(const JobKey& key, const YAML::Node& node, KeyValue* out);

// "" or why `number` is outside `key`'s range.
std::string KeyRangeProblem(const JobKey& key, double number);

// Stores `value` into `f` of `message` (added to the list when the field is repeated).
void StoreKeyValue(google::protobuf::Message* message, const google::protobuf::FieldDescriptor* f,
                   const KeyValue& value);

// The message holding `key`'s value, made on the way: the job's own sections, or `item` for a
// key of a list's item.
google::protobuf::Message* KeyHolder(const JobKey& key, google::protobuf::Message* job,
                                     google::protobuf::Message* item);
const google::protobuf::Message* KeyHolder(const JobKey& key, const google::protobuf::Message& job,
                                           const google::protobuf::Message* item);

}  // namespace strata
