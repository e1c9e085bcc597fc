// Status helpers shared by every service: absl::Status at our boundaries, grpc::Status on the wire.
#pragma once

#include <absl/strings/string_view.h>

#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <grpcpp/support/status.h>

namespace strata {

grpc::Status ToGrpcStatus(const absl::Status& status);

// `context` names the peer and operation ("pull from ps-1 (127.0.0.1:4000)") so that a timeout or
// refusal says who did not answer.
absl::Status FromGrpcStatus(const grpc::Status& status, absl::string_view context);

// Prefixes the message with context, keeping the code.
absl::Status Annotate(const absl::Status& status, absl::string_view context);

}  // namespace strata

#define STRATA_CONCAT_INNER(a, b) a##b
#define STRATA_CONCAT(a, b) STRATA_CONCAT_INNER(a, b)

#define STRATA_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::absl::Status strata_status_ = (expr);          \
    if (!strata_status_.ok()) return strata_status_; \
  } while (0)

#define STRATA_ASSIGN_OR_RETURN(lhs, expr) \
  STRATA_ASSIGN_OR_RETURN_IMPL(STRATA_CONCAT(strata_statusor_, __LINE__), lhs, expr)
#define STRATA_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()
