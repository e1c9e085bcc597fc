// `strata certificates --out DIR [--server-name NAME]`: a fresh CA and the server and client
// certificates a job with security.tls reads from security.tls_dir (docs/security.md, "Transport
// security"). `strata run` makes the same for a local run by itself; the compose project's one-shot
// step runs this inside the run volume, and a user may run it to have a directory to hand to a
// job or to a Kubernetes Secret. The CA's private key is never written: nothing else can be
// signed by that CA.
#include <cstdio>

#include "orchestrator/commands.h"
#include "services/common/wire/tls_certificates.h"

namespace strata::cli {

void AddCertificatesCommand(CLI::App& app, int* exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "certificates", "make a CA and the server and client certificates for security.tls_dir");
  auto out = std::make_shared<std::string>();
  auto server_name = std::make_shared<std::string>(kDefaultTlsServerName);
  cmd->add_option("--out", *out, "directory to create (mode 0700; must not exist or be empty)")
      ->required();
  cmd->add_option("--server-name", *server_name,
                  "the name clients expect in server.pem (security.tls_server_name)");
  cmd->callback([=] {
    RunCertificateOptions options;
    options.server_name = *server_name;
    if (absl::Status s = WriteRunCertificates(*out, options); !s.ok()) {
      std::fprintf(stderr, "strata certificates: %s\n", std::string(s.message()).c_str());
      *exit_code = 2;
      return;
    }
    std::printf("certificates for '%s' written to %s (ca.pem, server.pem, server.key, client.pem, "
                "client.key)\n",
                server_name->c_str(), out->c_str());
    *exit_code = 0;
  });
}

}  // namespace strata::cli
