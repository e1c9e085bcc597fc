#!/bin/sh
# The C++ compiler launcher CMake is configured with, always this script: it uses ccache when it is
# installed and runs the compiler directly when not. Configuring with ccache only when it is found
# made the second README command rebuild everything: `make quickstart` installs ccache after the
# Makefile has decided, so the next configure changed the launcher and every object went stale.
if command -v ccache >/dev/null 2>&1; then
  # The precompiled LibTorch header is only reused by ccache with these relaxations.
  : "${CCACHE_SLOPPINESS:=pch_defines,time_macros,include_file_mtime,include_file_ctime}"
  export CCACHE_SLOPPINESS
  exec ccache "$@"
fi
exec "$@"
