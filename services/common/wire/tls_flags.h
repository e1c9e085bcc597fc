// --tls, --tls-dir and --tls-server-name (tls.h) on a CLI11 command line: the same flags, with the
// same help, on every service binary and strata-health. Header-only, for the binaries' main()s
// (strata_common itself does not use CLI11). The values are checked by TlsSettingsFromFlags, so a
// mistake exits 2 with Strata's message rather than CLI11's.
#pragma once

#include <CLI/CLI.hpp>

#include "services/common/wire/tls.h"

namespace strata {

inline void AddTlsFlags(CLI::App* app, TlsFlagValues* values) {
  app->add_option(kTlsFlag, values->mode, kTlsHelp);
  app->add_option(kTlsDirFlag, values->dir, kTlsDirHelp);
  app->add_option(kTlsServerNameFlag, values->server_name, kTlsServerNameHelp);
}

}  // namespace strata
