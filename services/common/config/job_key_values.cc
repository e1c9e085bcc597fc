#include "services/common/config/job_key_values.h"

#include <algorithm>
#include <cmath>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

namespace strata {

using google::protobuf::EnumValueDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

namespace {

std::string Describe(const YAML::Node& node) {
  if (node.IsScalar()) return node.Scalar();
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a mapping";
  return "nothing";
}

template <typename T>
bool DecodeAs(const YAML::Node& node, double* number) {
  T v;
  if (!YAML::convert<T>::decode(node, v)) return false;
  *number = static_cast<double>(v);
  return true;
}

}  // namespace

// What a field of `key`'s type is called in messages.
const char* KeyTypeName(const FieldDescriptor* f) {
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_STRING:
    case FieldDescriptor::CPPTYPE_ENUM:
      return "a string";
    case FieldDescriptor::CPPTYPE_BOOL:
      return "true or false";
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_FLOAT:
      return "a number";
    default:
      return "an integer";
  }
}

// Decodes `node` as a value of `key`'s field: "" or the problem (type, finiteness, control
// characters, an enum spelling not allowed).
std::string DecodeKeyValue(const JobKey& key, const YAML::Node& node, KeyValue* out) {
  const FieldDescriptor* f = key.leaf();
  const std::string type_problem =
      absl::StrCat("expected ", KeyTypeName(f), ", got '", Describe(node), "'");
  if (!node.IsScalar()) return type_problem;
  out->text = node.Scalar();
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return DecodeAs<int32_t>(node, &out->number) ? "" : type_problem;
    case FieldDescriptor::CPPTYPE_INT64:
      return DecodeAs<int64_t>(node, &out->number) ? "" : type_problem;
    case FieldDescriptor::CPPTYPE_UINT32:
      return DecodeAs<uint32_t>(node, &out->number) ? "" : type_problem;
    case FieldDescriptor::CPPTYPE_UINT64:
      return DecodeAs<uint64_t>(node, &out->number) ? "" : type_problem;
    case FieldDescriptor::CPPTYPE_BOOL: {
      bool b;
      if (!YAML::convert<bool>::decode(node, b)) return type_problem;
      out->number = b ? 1 : 0;
      return "";
    }
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_FLOAT:
      if (!DecodeAs<double>(node, &out->number)) return type_problem;
      // yaml-cpp reads .inf and .nan as numbers; no setting of a job means either.
      if (!std::isfinite(out->number)) {
        return absl::StrCat("must be a finite number, got '", node.Scalar(), "'");
      }
      return "";
    case FieldDescriptor::CPPTYPE_STRING:
    case FieldDescriptor::CPPTYPE_ENUM:
      // No setting is spelled with control characters, and yaml-cpp's emitter writes some
      // unquoted (a trailing carriage return), so the job.yaml every service reads would hold
      // another value ("data\r" read back as "data"; found with the job-spec fuzz target).
      for (char c : out->text) {
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) {
          return "may not hold control characters (line breaks, tabs, escapes)";
        }
      }
      if (f->cpp_type() == FieldDescriptor::CPPTYPE_ENUM) {
        std::vector<std::string> names = key.allowed;
        if (names.empty()) {
          for (int i = 0; i < f->enum_type()->value_count(); ++i) {
            if (std::string s = Spelled(f->enum_type()->value(i)); !s.empty()) names.push_back(s);
          }
        }
        if (std::find(names.begin(), names.end(), out->text) != names.end()) {
          out->enum_value = EnumBySpelling(f->enum_type(), out->text);
        }
        if (out->enum_value == nullptr) {
          return absl::StrCat("'", out->text, "' is not one of ", absl::StrJoin(names, ", "));
        }
      }
      return "";
    default:
      return type_problem;
  }
}

// "" or why `number` is outside `key`'s range.
std::string KeyRangeProblem(const JobKey& key, double number) {
  const bool below = key.min && (key.min_open ? number <= *key.min : number < *key.min);
  const bool above = key.max && (key.max_open ? number >= *key.max : number > *key.max);
  if (!below && !above) return "";
  const bool integer = key.leaf()->cpp_type() != FieldDescriptor::CPPTYPE_DOUBLE;
  if (integer && key.min && key.max && *key.max - *key.min == 1) {
    return absl::StrCat("must be ", *key.min, " or ", *key.max, ", got ", number);
  }
  return absl::StrCat("must be ", key.RangeText(), ", got ", number);
}

// Stores `value` into `f` of `message` (added to the list when the field is repeated).
void StoreKeyValue(Message* message, const FieldDescriptor* f, const KeyValue& value) {
  const Reflection* r = message->GetReflection();
  const bool add = f->is_repeated();
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      add ? r->AddInt32(message, f, static_cast<int32_t>(value.number))
          : r->SetInt32(message, f, static_cast<int32_t>(value.number));
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      add ? r->AddInt64(message, f, static_cast<int64_t>(value.number))
          : r->SetInt64(message, f, static_cast<int64_t>(value.number));
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      add ? r->AddUInt32(message, f, static_cast<uint32_t>(value.number))
          : r->SetUInt32(message, f, static_cast<uint32_t>(value.number));
      break;
    case FieldDescriptor::CPPTYPE_UINT64: {
      // Through the text, not the double: a seed needs all 64 bits.
      const uint64_t v = std::stoull(value.text, nullptr, 0);
      add ? r->AddUInt64(message, f, v) : r->SetUInt64(message, f, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_BOOL:
      add ? r->AddBool(message, f, value.number != 0) : r->SetBool(message, f, value.number != 0);
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      add ? r->AddDouble(message, f, value.number) : r->SetDouble(message, f, value.number);
      break;
    case FieldDescriptor::CPPTYPE_FLOAT:
      add ? r->AddFloat(message, f, static_cast<float>(value.number))
          : r->SetFloat(message, f, static_cast<float>(value.number));
      break;
    case FieldDescriptor::CPPTYPE_STRING:
      add ? r->AddString(message, f, value.text) : r->SetString(message, f, value.text);
      break;
    case FieldDescriptor::CPPTYPE_ENUM:
      add ? r->AddEnum(message, f, value.enum_value) : r->SetEnum(message, f, value.enum_value);
      break;
    default:
      break;
  }
}

// The message holding `key`'s value, made on the way: the job's own sections, or `item` for a
// key of a list's item.
Message* KeyHolder(const JobKey& key, Message* job, Message* item) {
  if (item != nullptr) return item;
  Message* m = job;
  for (size_t i = 0; i + 1 < key.chain.size(); ++i) {
    m = m->GetReflection()->MutableMessage(m, key.chain[i]);
  }
  return m;
}

const Message* KeyHolder(const JobKey& key, const Message& job, const Message* item) {
  if (item != nullptr) return item;
  const Message* m = &job;
  for (size_t i = 0; i + 1 < key.chain.size(); ++i) {
    m = &m->GetReflection()->GetMessage(*m, key.chain[i]);
  }
  return m;
}

}  // namespace strata
