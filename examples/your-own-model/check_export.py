#!/usr/bin/env python3
"""Load a model `strata export` wrote and score it on the held-out .npy files, as you would.

    python3 examples/your-own-model/check_export.py trained.pt examples/your-own-model/out/data RUN_DIR

prints the accuracy PyTorch measures and the one the run's evaluator reported (summary.json), and
exits 1 if they differ by more than float tolerance.
"""
import json
import os
import sys

import numpy as np
import torch


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    model_path, data, run_dir = sys.argv[1:]
    model = torch.jit.load(model_path)
    model.eval()
    x = np.load(os.path.join(data, "test_x.npy"))
    y = np.load(os.path.join(data, "test_y.npy"))
    # What Strata feeds the model: uint8 features scaled to [0, 1] in float32.
    if x.dtype == np.uint8:
        x = x.astype(np.float32) * np.float32(1.0 / 255.0)
    with torch.no_grad():
        predicted = torch.cat([model(torch.from_numpy(x[i:i + 1000]).float()).argmax(1)
                               for i in range(0, len(x), 1000)])
    accuracy = float((predicted.numpy() == y).mean())
    with open(os.path.join(run_dir, "summary.json")) as f:
        reported = json.load(f)["final_val_acc"]
    print(f"PyTorch: accuracy {accuracy:.6f} on {len(y)} examples; the run reported {reported:.6f}")
    # One example either way is 1/len(y); float arithmetic in another order may flip one near a
    # tie, not more.
    return 0 if abs(accuracy - reported) <= 1.0 / len(y) + 1e-9 else 1


if __name__ == "__main__":
    sys.exit(main())
