#include "orchestrator/launch/yaml_text.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>

#include <absl/strings/ascii.h>
#include <absl/strings/str_split.h>

namespace strata::yaml {
namespace {

bool PlainChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' ||
         c == '/' || c == '=' || c == '@' || c == '%' || c == '+' || c == ':';
}

bool LooksReserved(const std::string& v) {
  const std::string lower = absl::AsciiStrToLower(v);
  for (const char* word : {"true", "false", "yes", "no", "on", "off", "y", "n", "null", "~"}) {
    if (lower == word) return true;
  }
  return false;
}

// Anything a YAML 1.1 or 1.2 reader could take for a number: quoted, whatever it really is.
bool LooksNumeric(const std::string& v) {
  size_t i = 0;
  if (v[i] == '+' || v[i] == '-') ++i;
  if (i < v.size() && v[i] == '.') ++i;
  return i < v.size() && std::isdigit(static_cast<unsigned char>(v[i]));
}

std::string Indent(int n) { return std::string(static_cast<size_t>(n), ' '); }

void EmitComment(const std::string& comment, int indent, std::string* out) {
  if (comment.empty()) return;
  for (absl::string_view line : absl::StrSplit(comment, '\n')) {
    *out += Indent(indent);
    *out += line.empty() ? "#" : "# ";
    out->append(line.data(), line.size());
    *out += "\n";
  }
}

void EmitLiteral(const std::string& text, int indent, std::string* out) {
  const bool ends_with_newline = !text.empty() && text.back() == '\n';
  *out += ends_with_newline ? "|\n" : "|-\n";
  const std::string body = ends_with_newline ? text.substr(0, text.size() - 1) : text;
  for (absl::string_view line : absl::StrSplit(body, '\n')) {
    if (!line.empty()) {
      *out += Indent(indent);
      out->append(line.data(), line.size());
    }
    *out += "\n";
  }
}

std::string FlowText(const Node& node) {
  if (node.kind() == Node::Kind::kScalar) return node.scalar();
  std::string out = node.kind() == Node::Kind::kMap ? "{" : "[";
  bool first = true;
  for (const Node::Entry& e : node.entries()) {
    if (!first) out += ", ";
    first = false;
    if (node.kind() == Node::Kind::kMap) out += QuoteScalar(e.key) + ": ";
    out += FlowText(e.value);
  }
  return out + (node.kind() == Node::Kind::kMap ? "}" : "]");
}

void EmitBlock(const Node& node, int indent, std::string* out);

// The value after "key:" or "- ": on the same line for scalars and flow collections, below it
// for block collections.
void EmitValue(const Node& value, int indent, std::string* out) {
  if (value.kind() == Node::Kind::kScalar) {
    if (value.literal()) {
      *out += " ";
      EmitLiteral(value.scalar(), indent, out);
    } else {
      *out += " " + value.scalar() + "\n";
    }
  } else if (value.flow() || value.entries().empty()) {
    *out += " " + FlowText(value) + "\n";
  } else {
    *out += "\n";
    EmitBlock(value, indent, out);
  }
}

void EmitBlock(const Node& node, int indent, std::string* out) {
  for (const Node::Entry& e : node.entries()) {
    EmitComment(e.value.comment(), indent, out);
    if (node.kind() == Node::Kind::kMap) {
      *out += Indent(indent) + QuoteScalar(e.key) + ":";
      // Sequences under a key are indented like kubectl's own output is not: two more spaces
      // keep the items visibly inside their key.
      EmitValue(e.value, indent + 2, out);
      continue;
    }
    const Node& item = e.value;
    if (item.kind() != Node::Kind::kScalar && !item.flow() && !item.entries().empty()) {
      // A block collection as an item: its first line goes right after "- ".
      std::string inner;
      EmitBlock(item, indent + 2, &inner);
      *out += Indent(indent) + "- " + inner.substr(static_cast<size_t>(indent) + 2);
      continue;
    }
    *out += Indent(indent) + "-";
    EmitValue(item, indent + 2, out);
  }
}

}  // namespace

std::string QuoteScalar(const std::string& v) {
  bool plain = !v.empty() && !LooksReserved(v) && !LooksNumeric(v) && v.back() != ':' &&
               !(v[0] == '-' && (v.size() == 1 || v[1] == ' ')) && v[0] != ':';
  for (size_t i = 0; plain && i < v.size(); ++i) {
    plain = PlainChar(v[i]) && !(v[i] == ':' && i + 1 < v.size() && v[i + 1] == ' ');
  }
  if (plain) return v;
  std::string out = "\"";
  for (char c : v) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        out += c;
    }
  }
  return out + "\"";
}

Node Node::Str(std::string value) {
  Node n(Kind::kScalar);
  if (value.find('\n') != std::string::npos) {
    n.literal_ = true;
    n.scalar_ = std::move(value);
  } else {
    n.scalar_ = QuoteScalar(value);
  }
  return n;
}

Node Node::Int(int64_t value) {
  Node n(Kind::kScalar);
  n.scalar_ = std::to_string(value);
  return n;
}

Node Node::Num(double value) {
  Node n(Kind::kScalar);
  char buf[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, value);
    if (std::strtod(buf, nullptr) == value) break;
  }
  n.scalar_ = buf;
  return n;
}

Node Node::Bool(bool value) {
  Node n(Kind::kScalar);
  n.scalar_ = value ? "true" : "false";
  return n;
}

Node Node::Strs(const std::vector<std::string>& values) {
  Node n(Kind::kSeq);
  for (const std::string& v : values) n.Push(Str(v));
  return n;
}

Node& Node::Add(std::string key, Node value, std::string comment) {
  if (!comment.empty()) value.comment_ = std::move(comment);
  entries_.push_back({std::move(key), std::move(value)});
  return *this;
}

Node& Node::Push(Node item, std::string comment) {
  if (!comment.empty()) item.comment_ = std::move(comment);
  entries_.push_back({"", std::move(item)});
  return *this;
}

Node* Node::Find(const std::string& key) {
  if (kind_ != Kind::kMap) return nullptr;
  for (Entry& e : entries_) {
    if (e.key == key) return &e.value;
  }
  return nullptr;
}

const Node* Node::Find(const std::string& key) const { return const_cast<Node*>(this)->Find(key); }

Node& Node::Comment(std::string text) {
  comment_ = std::move(text);
  return *this;
}

Node& Node::Flow() {
  flow_ = true;
  return *this;
}

std::string Emit(const Node& node) {
  std::string out;
  EmitComment(node.comment(), 0, &out);
  if (node.kind() == Node::Kind::kScalar) {
    out += node.scalar() + "\n";
  } else if (node.entries().empty() || node.flow()) {
    out += FlowText(node) + "\n";
  } else {
    EmitBlock(node, 0, &out);
  }
  return out;
}

std::string EmitAll(const std::vector<Node>& documents) {
  std::string out;
  for (size_t i = 0; i < documents.size(); ++i) {
    if (i > 0) out += "---\n";
    out += Emit(documents[i]);
  }
  return out;
}

}  // namespace strata::yaml
