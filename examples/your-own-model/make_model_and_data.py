#!/usr/bin/env python3
"""Make a model and a data set of your own for Strata, the way you would with yours.

The model is a small PyTorch network, saved as TorchScript (torch.jit.script). The data set is
Fashion-MNIST, read from Debian's dataset-fashion-mnist and saved as NumPy arrays: uint8 images
(Strata scales uint8 features to [0, 1]) and int64 class labels.

    python3 examples/your-own-model/make_model_and_data.py --out examples/your-own-model/out

writes OUT/net.pt and OUT/data/{train,test}_{x,y}.npy. --model mlp is the built-in MLP's twin
(784-256-128-10); --model cnn is a small convolutional network with BatchNorm, whose running
statistics Strata keeps as buffers.
"""
import argparse
import gzip
import os

import numpy as np
import torch

# Fashion-MNIST's pixel statistics: the network normalises its own input, so the .npy files
# keep the raw pixels.
MEAN, STD = 0.2860, 0.3530


class Mlp(torch.nn.Module):
    __constants__ = ["mean", "std"]

    def __init__(self, classes: int = 10):
        super().__init__()
        self.mean, self.std = MEAN, STD
        self.fc1 = torch.nn.Linear(28 * 28, 256)
        self.fc2 = torch.nn.Linear(256, 128)
        self.fc3 = torch.nn.Linear(128, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = ((x - self.mean) / self.std).flatten(1)
        x = torch.relu(self.fc1(x))
        x = torch.relu(self.fc2(x))
        return self.fc3(x)


class Cnn(torch.nn.Module):
    __constants__ = ["mean", "std"]

    def __init__(self, classes: int = 10):
        super().__init__()
        self.mean, self.std = MEAN, STD
        self.conv = torch.nn.Conv2d(1, 16, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(16)
        self.fc1 = torch.nn.Linear(16 * 14 * 14, 128)
        self.fc2 = torch.nn.Linear(128, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn(self.conv((x - self.mean) / self.std)))
        x = torch.nn.functional.max_pool2d(x, 2)
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


def read_idx(path: str) -> np.ndarray:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def find(source: str, name: str) -> str:
    for candidate in (name + ".gz", name):
        path = os.path.join(source, candidate)
        if os.path.exists(path):
            return path
    raise SystemExit(f"missing {os.path.join(source, name)}[.gz]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="directory for net.pt and data/")
    parser.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    parser.add_argument("--source", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--train", type=int, default=30000, help="training examples to keep")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    model = Mlp() if args.model == "mlp" else Cnn()
    os.makedirs(os.path.join(args.out, "data"), exist_ok=True)
    torch.jit.script(model).save(os.path.join(args.out, "net.pt"))

    splits = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
              "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
    for split, (images, labels) in splits.items():
        x = read_idx(find(args.source, images))[:, None, :, :]  # N x 1 x 28 x 28, uint8
        y = read_idx(find(args.source, labels)).astype(np.int64)
        if split == "train":
            x, y = x[:args.train], y[:args.train]
        np.save(os.path.join(args.out, "data", f"{split}_x.npy"), np.ascontiguousarray(x))
        np.save(os.path.join(args.out, "data", f"{split}_y.npy"), y)
        print(f"{split}: {x.shape[0]} examples of shape {tuple(x.shape[1:])}")
    print(f"model: {args.model}, {sum(p.numel() for p in model.parameters())} parameters, "
          f"saved to {os.path.join(args.out, 'net.pt')}")


if __name__ == "__main__":
    main()
