// How one replica's gradients reach one peer: the seam between the stream replicas' mesh
// (gradient_mesh.h) and its transports, a gRPC client stream (gradient_mesh.cc) or a plain TCP
// connection (tcp_mesh_link.h). The mesh's writer thread for the peer owns the sender.
#pragma once

#include <absl/status/status.h>

#include "strata/v1/collective.pb.h"

namespace strata {

class GradientSender {
 public:
  virtual ~GradientSender() = default;
  // Writes one message in full, after the ones before it. An error: the connection broke, and
  // nothing more goes on it.
  virtual absl::Status Send(const v1::StreamGradient& message) = 0;
  // After the last Send (the sender's end message among them): until the peer has taken every
  // message, at most the mesh's deadline.
  virtual absl::Status Finish() = 0;
  // Breaks the connection off, from any thread: a Send or Finish under way returns.
  virtual void Cancel() = 0;
};

}  // namespace strata
