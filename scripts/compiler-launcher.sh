#!/bin/sh
# The C++ compiler launcher CMake is configured with, always this script: it uses ccache when it is
# installed and runs the compiler directly when not. Configuring with ccache only when it is found
# made the second README command rebuild everything: `make quickstart` installs ccache after the
# Makefile has decided, so the next configure changed the launcher and every object went stale.
if command -v ccache >/dev/null 2>&1; then
  # The precompiled LibTorch header is only reused by ccache with these relaxations.
  : "${CCACHE_SLOPPINESS:=pch_defines,time_macros,include_file_mtime,include_file_ctime}"
  # Paths below the checkout count relative to it, and the build directory does not count, so
  # two checkouts of the same sources (a second clone, CI's fresh one) share the cache instead of
  # compiling everything again. The price: an object's debug information may name the directory
  # of the checkout that first compiled it.
  : "${CCACHE_BASEDIR:=$(cd "$(dirname "$0")/.." && pwd -P)}"
  : "${CCACHE_NOHASHDIR:=1}"
  export CCACHE_SLOPPINESS CCACHE_BASEDIR CCACHE_NOHASHDIR
  exec ccache "$@"
fi
exec "$@"
