#include "services/common/config/broker_address.h"

#include <algorithm>
#include <cctype>

#include <absl/strings/match.h>
#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/strip.h>

namespace strata {
namespace {

// sockaddr_un's sun_path holds 108 bytes with the terminating NUL.
constexpr size_t kMaxUnixPath = 107;

absl::Status Refused(const std::string& text, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("'", text, "' is not a broker address (", why,
                   "; give redis://HOST:PORT or the absolute path of a unix socket)"));
}

}  // namespace

std::string BrokerAddress::Describe() const {
  return unix_path.empty() ? absl::StrCat("redis://", host, ":", port)
                           : absl::StrCat("unix:", unix_path);
}

absl::StatusOr<BrokerAddress> ParseBrokerAddress(const std::string& text) {
  BrokerAddress address;
  absl::string_view rest = text;
  if (absl::ConsumePrefix(&rest, "unix://") || rest.substr(0, 1) == "/") {
    if (rest.substr(0, 1) != "/") return Refused(text, "a unix socket's path must be absolute");
    if (rest.size() > kMaxUnixPath) {
      return Refused(text,
                     absl::StrCat("a unix socket's path holds at most ", kMaxUnixPath, " bytes"));
    }
    for (char c : rest) {
      if (!std::isprint(static_cast<unsigned char>(c))) return Refused(text, "unprintable byte");
    }
    address.unix_path = std::string(rest);
    return address;
  }
  if (!absl::ConsumePrefix(&rest, "redis://")) return Refused(text, "unknown scheme");
  const size_t colon = rest.rfind(':');
  if (colon == absl::string_view::npos) return Refused(text, "no port");
  const absl::string_view host = rest.substr(0, colon);
  const absl::string_view port = rest.substr(colon + 1);
  if (host.empty() || host.size() > 253) return Refused(text, "no host");
  for (char c : host) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != ':' &&
        c != '[' && c != ']') {
      return Refused(text, "the host holds letters, digits, '.', '-' only, or an IP address");
    }
  }
  int number = 0;
  if (port.empty() || port.size() > 5 ||
      !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      !absl::SimpleAtoi(port, &number) || number < 1 || number > 65535) {
    return Refused(text, "the port must be 1 to 65535");
  }
  address.host = std::string(host);
  // [::1]: hiredis takes the address without brackets.
  if (absl::StartsWith(address.host, "[") && absl::EndsWith(address.host, "]")) {
    address.host = address.host.substr(1, address.host.size() - 2);
  }
  address.port = number;
  return address;
}

}  // namespace strata
