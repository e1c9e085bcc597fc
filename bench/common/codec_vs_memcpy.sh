#!/usr/bin/env bash
# Codec throughput against memcpy, repeated (Google Benchmark repetitions, medians), with the
# ratio per size. Usage: bench/common/codec_vs_memcpy.sh [BUILD_DIR]
set -euo pipefail
build=${1:-build}
"$build/bin/strata-bench-codec" --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
  --benchmark_format=csv 2>/dev/null | awk -F, '
  /_median"?,/ {
    name=$1; gsub(/"/, "", name); sub(/_median$/, "", name)
    split(name, p, "/"); kind=p[1]; size=p[2]
    bps[kind, size]=$(NF-4); sizes[size]=1
  }
  END {
    printf "%-10s %12s %12s %12s %8s %8s\n", "bytes", "memcpy GB/s", "encode GB/s", "decode GB/s", "enc/mem", "dec/mem"
    for (s in sizes) {
      m=bps["BM_Memcpy", s]; e=bps["BM_Encode", s]; d=bps["BM_Decode", s]
      if (m > 0) printf "%-10s %12.2f %12.2f %12.2f %8.2f %8.2f\n", s, m/1e9, e/1e9, d/1e9, e/m, d/m
    }
  }' | sort -n
