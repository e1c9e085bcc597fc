// A host name as a certificate's subject alternative name holds it (RFC 1123): dot-separated
// labels of letters, digits and '-', none empty, none longer than 63 characters, none starting or
// ending with '-', 253 characters in all. Checked where a name comes in (the job key
// security.tls_server_name) and where it goes into a certificate, so that no name can add an entry
// of its own to the list the certificate is made from.
#pragma once

#include <cctype>

#include <absl/strings/str_split.h>
#include <absl/strings/string_view.h>

namespace strata {

inline bool IsDnsHostName(absl::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  for (absl::string_view label : absl::StrSplit(name, '.')) {
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') {
      return false;
    }
    for (char c : label) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') return false;
    }
  }
  return true;
}

}  // namespace strata
