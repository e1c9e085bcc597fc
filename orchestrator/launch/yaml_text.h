// A small YAML document builder for files people read and keep in git (`strata render`): block
// style, keys in the order given, comments where they help, multi-line strings as literal blocks,
// and a scalar quoted only when plain style would change its meaning. yaml-cpp's emitter can do
// most of this, but not comments beside keys or a stable, reviewable layout of its own choosing.
// Pure: builds text, touches nothing.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace strata::yaml {

class Node {
 public:
  enum class Kind { kScalar, kMap, kSeq };

  static Node Str(std::string value);  // a string: quoted when plain style would misread it
  static Node Int(int64_t value);
  static Node Num(double value);  // shortest form that reads back the same
  static Node Bool(bool value);
  static Node Map() { return Node(Kind::kMap); }
  static Node Seq() { return Node(Kind::kSeq); }
  // A sequence of strings.
  static Node Strs(const std::vector<std::string>& values);

  // Map: appends `key` (keys keep the order they were added in). Returns *this for chaining.
  Node& Add(std::string key, Node value, std::string comment = "");
  // Sequence: appends an item.
  Node& Push(Node item, std::string comment = "");
  // Written on its own line(s) before this node when it is a document, map value or item.
  Node& Comment(std::string text);
  // A short sequence or map of scalars on one line: [a, b] / {k: v}.
  Node& Flow();

  // Map: the value under `key`, or nullptr (also for a scalar or a sequence). For code that
  // amends built objects (`strata submit` adds owner references).
  Node* Find(const std::string& key);
  const Node* Find(const std::string& key) const;

  struct Entry;
  Kind kind() const { return kind_; }
  const std::string& scalar() const { return scalar_; }
  bool literal() const { return literal_; }
  bool flow() const { return flow_; }
  const std::string& comment() const { return comment_; }
  const std::vector<Entry>& entries() const { return entries_; }
  bool empty() const { return entries_.empty(); }

 private:
  explicit Node(Kind kind) : kind_(kind) {}

  Kind kind_;
  std::string scalar_;    // already in its written form (quoted if needed), except literals
  bool literal_ = false;  // multi-line string: written as a `|` block
  bool flow_ = false;
  std::string comment_;         // above the node
  std::vector<Entry> entries_;  // map entries or sequence items
};

struct Node::Entry {
  std::string key;  // empty for sequence items
  Node value;
};

// One document; ends with a newline.
std::string Emit(const Node& node);
// Several documents separated by `---`.
std::string EmitAll(const std::vector<Node>& documents);

// `value` as a YAML scalar: plain when that reads back as the same string, else double-quoted.
std::string QuoteScalar(const std::string& value);

}  // namespace strata::yaml
