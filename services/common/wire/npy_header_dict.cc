#include "services/common/wire/npy_header_dict.h"

#include <cstdint>
#include <string>
#include <utility>

#include <absl/strings/str_cat.h>

namespace strata {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
// What a Python number or name may be made of; used to quote a whole bad token.
bool IsTokenChar(char c) {
  return IsDigit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '.' ||
         c == '+' || c == '-';
}

// The header dict as np.save writes it, e.g.
//   {'descr': '<f4', 'fortran_order': False, 'shape': (60000, 784), }
// then spaces and '\n'. Keys in any order, each exactly once; strings in single or double quotes
// without escapes; a trailing comma in the dict and the tuple; whitespace between tokens. No
// recursion: a nested value (a structured descr) is refused where it starts.
class HeaderParser {
 public:
  HeaderParser(absl::string_view text, int major, int max_dims)
      : text_(text), major_(major), max_dims_(max_dims) {}

  absl::Status Parse(NpyHeaderDict* out) {
    if (Peek() != '{') return Unexpected("'{' (the header is a Python dict literal)");
    ++pos_;
    bool seen[3] = {false, false, false};
    static constexpr const char* kKeys[3] = {"descr", "fortran_order", "shape"};
    for (;;) {
      SkipSpace();
      if (Peek() == '}') {
        ++pos_;
        break;
      }
      if (Peek() != '\'' && Peek() != '"') return Unexpected("a quoted key or '}'");
      std::string key;
      NPY_RETURN_IF_ERROR(ParseString(&key));
      int index = -1;
      for (int k = 0; k < 3; ++k) {
        if (key == kKeys[k]) index = k;
      }
      if (index < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("header has the key ", PyQuoted(key),
                         "; a .npy header holds exactly 'descr', 'fortran_order' and 'shape'"));
      }
      if (seen[index]) {
        return absl::InvalidArgumentError(
            absl::StrCat("header has the key ", PyQuoted(key), " twice"));
      }
      seen[index] = true;
      SkipSpace();
      if (Peek() != ':') return Unexpected("':'");
      ++pos_;
      SkipSpace();
      if (index == 0) {
        NPY_RETURN_IF_ERROR(ParseDescr(&out->descr));
      } else if (index == 1) {
        NPY_RETURN_IF_ERROR(ParseBool(&out->fortran_order));
      } else {
        NPY_RETURN_IF_ERROR(ParseShape(&out->shape));
      }
      SkipSpace();
      if (Peek() == ',') {
        ++pos_;
        continue;
      }
      if (Peek() == '}') {
        ++pos_;
        break;
      }
      return Unexpected("',' or '}'");
    }
    SkipSpace();
    if (!AtEnd()) return Unexpected("only spaces and a newline after the dict");
    for (int k = 0; k < 3; ++k) {
      if (!seen[k]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "header has no '", kKeys[k],
            "' key; a .npy header holds exactly 'descr', 'fortran_order' and 'shape'"));
      }
    }
    return absl::OkStatus();
  }

 private:
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return AtEnd() ? '\0' : text_[pos_]; }
  void SkipSpace() {
    while (!AtEnd() && IsSpace(text_[pos_])) ++pos_;
  }
  absl::string_view TokenAt(size_t at) const {
    size_t end = at;
    while (end < text_.size() && IsTokenChar(text_[end])) ++end;
    return text_.substr(at, end - at);
  }

  absl::Status Unexpected(absl::string_view expected) const {
    return absl::InvalidArgumentError(
        absl::StrCat("header is not the dict literal np.save writes: expected ", expected,
                     " at byte ", pos_, " of the header, found ",
                     AtEnd() ? std::string("its end") : QuoteHostileBytes(text_.substr(pos_), 24)));
  }

  absl::Status ParseString(std::string* out) {
    const char quote = Peek();
    const size_t start = pos_++;
    while (!AtEnd() && text_[pos_] != quote) {
      const char c = text_[pos_];
      if (c < 0x20 || c > 0x7e || c == '\\') {
        return absl::InvalidArgumentError(
            absl::StrCat("header string ", QuoteHostileBytes(text_.substr(start, pos_ + 1 - start)),
                         " holds a byte other than printable ASCII without escapes"));
      }
      ++pos_;
    }
    if (AtEnd()) {
      return absl::InvalidArgumentError(
          absl::StrCat("header string ", QuoteHostileBytes(text_.substr(start)), " is not closed"));
    }
    *out = std::string(text_.substr(start + 1, pos_ - start - 1));
    ++pos_;
    return absl::OkStatus();
  }

  absl::Status ParseDescr(std::string* out) {
    if (Peek() == '[' || Peek() == '{') {
      return absl::InvalidArgumentError(
          absl::StrCat("the dtype is structured (", QuoteHostileBytes(text_.substr(pos_), 32),
                       "); only plain numeric arrays are read: save each field as its own array"));
    }
    if (Peek() != '\'' && Peek() != '"') return Unexpected("the dtype as a quoted string");
    return ParseString(out);
  }

  absl::Status ParseBool(bool* out) {
    const absl::string_view token = TokenAt(pos_);
    if (token == "True" || token == "False") {
      *out = token == "True";
      pos_ += token.size();
      return absl::OkStatus();
    }
    return Unexpected("True or False for 'fortran_order'");
  }

  absl::Status ParseShape(std::vector<int64_t>* out) {
    if (Peek() == '[') {
      return absl::InvalidArgumentError(
          "the shape is a list; np.save writes a tuple such as (60000, 784)");
    }
    if (Peek() != '(') return Unexpected("the shape as a tuple such as (60000, 784)");
    ++pos_;
    SkipSpace();
    if (Peek() == ')') {
      ++pos_;
      return absl::OkStatus();
    }
    for (;;) {
      int64_t dim = 0;
      NPY_RETURN_IF_ERROR(ParseDim(&dim));
      out->push_back(dim);
      if (static_cast<int>(out->size()) > max_dims_) {
        return absl::InvalidArgumentError(absl::StrCat("the shape has more than ", max_dims_,
                                                       " dimensions (at most ", max_dims_,
                                                       " are read)"));
      }
      SkipSpace();
      if (Peek() == ',') {
        ++pos_;
        SkipSpace();
        if (Peek() == ')') {
          ++pos_;
          return absl::OkStatus();
        }
        continue;
      }
      if (Peek() == ')') {
        if (out->size() == 1) {
          return absl::InvalidArgumentError(
              absl::StrCat("the shape (", out->front(),
                           ") is a number, not a tuple: np.save writes (", out->front(), ",)"));
        }
        ++pos_;
        return absl::OkStatus();
      }
      return Unexpected("',' or ')' in the shape");
    }
  }

  absl::Status ParseDim(int64_t* out) {
    const size_t start = pos_;
    const absl::string_view token = TokenAt(start);
    if (token.empty()) return Unexpected("an integer dimension");
    size_t at = start;
    const bool negative = text_[at] == '-';
    if (negative) ++at;
    const size_t digits_start = at;
    while (at < text_.size() && IsDigit(text_[at])) ++at;
    const absl::string_view digits = text_.substr(digits_start, at - digits_start);
    // Python 2 wrote long integers with an 'L'; numpy's reader drops it in 1.0 and 2.0 headers.
    if (major_ <= 2 && at < text_.size() && text_[at] == 'L' && !digits.empty()) ++at;
    if (digits.empty() || at != start + token.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the shape holds ", QuoteHostileBytes(token), ", which is not an integer"));
    }
    if (digits.size() > 1 && digits[0] == '0') {
      return absl::InvalidArgumentError(
          absl::StrCat("the shape holds ", QuoteHostileBytes(token),
                       ", which is not a Python integer (leading zero)"));
    }
    if (negative) {
      return absl::InvalidArgumentError(
          absl::StrCat("the shape has a negative dimension (", token, ")"));
    }
    uint64_t value = 0;
    for (char c : digits) {
      const uint64_t digit = static_cast<uint64_t>(c - '0');
      if (value > (static_cast<uint64_t>(INT64_MAX) - digit) / 10) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the shape has a dimension of ", QuoteHostileBytes(digits), ", beyond 2^63 - 1"));
      }
      value = value * 10 + digit;
    }
    *out = static_cast<int64_t>(value);
    pos_ = at;
    return absl::OkStatus();
  }

  absl::string_view text_;
  size_t pos_ = 0;
  int major_;
  int max_dims_;
};

}  // namespace

// Bytes of a hostile header, quoted for a one-line message: printable ASCII as it is, '"' and
// '\\' and every other byte as \xHH.
std::string QuoteHostileBytes(absl::string_view text, size_t max) {
  std::string out = "\"";
  for (char c : text.substr(0, max)) {
    if (c >= 0x20 && c <= 0x7e && c != '"' && c != '\\') {
      out.push_back(c);
    } else {
      absl::StrAppend(&out, "\\x", absl::Hex(static_cast<uint8_t>(c), absl::kZeroPad2));
    }
  }
  absl::StrAppend(&out, text.size() > max ? "...\"" : "\"");
  return out;
}

// A string of the header (printable ASCII, ParseString made sure) as Python writes it: 'x'.
std::string PyQuoted(absl::string_view text) {
  if (text.size() > 40 || text.find('\'') != absl::string_view::npos)
    return QuoteHostileBytes(text);
  return absl::StrCat("'", text, "'");
}

absl::Status ParseNpyHeaderDict(absl::string_view text, int major, int max_dims,
                                NpyHeaderDict* out) {
  return HeaderParser(text, major, max_dims).Parse(out);
}

}  // namespace strata
