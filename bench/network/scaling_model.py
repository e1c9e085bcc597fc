#!/usr/bin/python3
"""The cost model of docs/scaling.md: a training step of the ring all-reduce and of push/pull
with P parameter servers, a PDP round and the switch handover, with constants fitted to the
emulated-network measurements of docs/benchmarks.md. Prints the fit, the check against measured
points the fit did not use, and the predicted throughput and best strategy for 16 to 1,024
workers. Usage: scaling_model.py (no arguments; every input is below, with where it comes from).

Units: seconds, bytes, bytes per second.
"""
import math

MB = 1e6
MIB = 1048576

# --- Constants fitted to the emulated measurements (docs/benchmarks.md, "On an emulated network").
# TCP payload over a link: 1448 bytes of payload in 1514 on the wire, which tbf counts.
TCP_EFFICIENCY = 1448 / 1514
# Ring all-reduce, 4 hosts at 1 Gbit/s, busbw in MB/s by buffer (Strata's plain-TCP link).
RING_4_HOSTS_1GBIT = {1: 118, 4: 118, 25: 119}
# Per-worker compute per step (batch 32) at one core, from the emulated runs:
#   MLP: all-reduce at 1 Gbit/s, 4 workers at 0.28 of a core: 13.6 ms a step, of which the ring's
#     11.9 ms (1.5 x 0.94 MB at 119.5 MB/s): 1.7 ms at 0.28 of a core.
#   ResNet-20: 1,187 samples/s at 10 Gbit/s, 4 ranks at 0.5 of a core: 108 ms a step, 1.4 ms of it
#     the ring.
#   mlp_wide: 1,424 samples/s at 10 Gbit/s: 90 ms a step, 29 ms of it the ring (23.3 MB).
COMPUTE_S_PER_CORE = {
    "mlp": 0.0017 * 0.28,
    "resnet20": (0.108 - 0.0014) * 0.5,
    "mlp_wide": (0.090 - 0.029) * 0.5,
}
MODEL_BYTES = {"mlp": 235146 * 4, "resnet20": 272474 * 4, "mlp_wide": 5824522 * 4}
BATCH_PER_WORKER = 32


def link_bytes_per_s(gbit):
    return gbit * 1e9 / 8 * TCP_EFFICIENCY


def ring_seconds(size, n, bandwidth, alpha):
    """One ring all-reduce of `size` bytes over n ranks: 2(n-1) messages of size/n, each paying a
    per-message latency alpha, and 2(n-1)/n of the buffer over each rank's link."""
    if n == 1:
        return 0.0
    return 2 * (n - 1) * alpha + 2 * (n - 1) / n * size / bandwidth


def fit_alpha():
    """alpha from the smallest buffer at 4 hosts, the bandwidth being the link's (TCP payload)."""
    bandwidth = link_bytes_per_s(1)
    n, size = 4, 1 * MIB
    busbw = RING_4_HOSTS_1GBIT[1] * MB
    seconds = 2 * (n - 1) / n * size / busbw
    return max(0.0, (seconds - 2 * (n - 1) / n * size / bandwidth) / (2 * (n - 1))), bandwidth


def busbw(size, n, bandwidth, alpha):
    return 2 * (n - 1) / n * size / ring_seconds(size, n, bandwidth, alpha)


def allreduce_samples_per_s(model, n, gbit, alpha, core=1.0):
    size = MODEL_BYTES[model] if isinstance(model, str) else model[0]
    compute = (COMPUTE_S_PER_CORE[model] if isinstance(model, str) else model[1]) / core
    step = compute + ring_seconds(size, n, link_bytes_per_s(gbit), alpha)
    return n * BATCH_PER_WORKER / step


def pushpull_samples_per_s(model, n, servers, gbit, core=1.0, largest_share=None):
    """Asynchronous push/pull: each worker's step is its compute, then pushing its gradients and
    pulling the model back over its own link, one after the other (the reply leaves the server
    once the push is in: on the emulated hosts a worker behind 250 Mbit/s took 60 ms a step, two
    transfers of 0.94 MB at 31 MB/s); the servers' links together carry n models each way per
    round of steps, the most loaded one its share of them."""
    size = MODEL_BYTES[model] if isinstance(model, str) else model[0]
    compute = (COMPUTE_S_PER_CORE[model] if isinstance(model, str) else model[1]) / core
    bandwidth = link_bytes_per_s(gbit)
    share = largest_share if largest_share is not None else 1 / servers
    per_worker = 1 / (compute + 2 * size / bandwidth)  # steps/s of one worker alone
    servers_bound = bandwidth / (share * size)  # steps/s the busiest server's link carries
    return min(n * per_worker, servers_bound) * BATCH_PER_WORKER


def handover_seconds(size, n, servers, gbit):
    """The switch: the servers load the handed-over model (from a shared disk or a worker: one
    model over the servers' links) and every worker pulls it once."""
    bandwidth = link_bytes_per_s(gbit)
    return size / (servers * bandwidth) + n * size / (servers * bandwidth)


def main():
    alpha, bandwidth = fit_alpha()
    print(f"fit: link payload {bandwidth / MB:.1f} MB/s at 1 Gbit/s, alpha {alpha * 1e6:.0f} us")
    print("\nring busbw at 1 Gbit/s, predicted (MB/s):")
    for n in (2, 4, 8):
        cells = ", ".join(f"{s} MiB {busbw(s * MIB, n, bandwidth, alpha) / MB:.1f}"
                          for s in (1, 4, 25))
        print(f"  {n} hosts: {cells}")
    print("\npush/pull against all-reduce, MLP, 4 workers at 0.28 of a core, 1 Gbit/s, predicted"
          " (samples/s):")
    ar = allreduce_samples_per_s("mlp", 4, 1, alpha, core=0.28)
    p1 = pushpull_samples_per_s("mlp", 4, 1, 1, core=0.28)
    # The partition plan gives whole tensors to servers: with 2 servers one holds the first
    # weight matrix, 200,704 of the 235,146 floats.
    p2 = pushpull_samples_per_s("mlp", 4, 2, 1, core=0.28, largest_share=200704 / 235146)
    print(f"  all-reduce {ar:.0f}, push/pull 1 server {p1:.0f}, 2 servers {p2:.0f}"
          f" (2 servers, even split: {pushpull_samples_per_s('mlp', 4, 2, 1, core=0.28):.0f})")

    # Between machines a message also pays the network's own latency: ~20 us one way in a data
    # centre (an assumption, not measured here: the emulated links have no delay).
    real_alpha = alpha + 20e-6
    models = {"mlp": "quickstart MLP (0.94 MB)", "resnet20": "ResNet-20 (1.1 MB)",
              "big": "100 MB model"}
    # The 100 MB model: 25M parameters; its compute per step assumed at 0.3 s on a worker's core.
    big = (100 * MB, 0.3)
    print("\npredicted samples/s per worker count (one core per worker, batch 32 per worker;"
          " push/pull with the best P <= n/4 servers, evenly split):")
    for gbit in (10, 100):
        for key, label in models.items():
            model = big if key == "big" else key
            row = []
            for n in (16, 64, 256, 1024):
                a = allreduce_samples_per_s(model, n, gbit, real_alpha)
                best_p, p = max(((q, pushpull_samples_per_s(model, n, q, gbit))
                                 for q in range(1, max(1, n // 4) + 1)), key=lambda t: t[1])
                winner = "ring" if a >= p else f"ps x{best_p}"
                row.append(f"n={n}: ring {a:,.0f} / ps {p:,.0f} ({winner})")
            print(f"  {gbit} Gbit/s {label}: " + "; ".join(row))
    print("\nhandover of the switch (s), 100 MB model, servers = n/16:")
    for gbit in (10, 100):
        cells = ", ".join(f"n={n} {handover_seconds(100 * MB, n, max(1, n // 16), gbit):.2f}"
                          for n in (16, 64, 256, 1024))
        print(f"  {gbit} Gbit/s: {cells}")


if __name__ == "__main__":
    main()
