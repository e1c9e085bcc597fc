#!/usr/bin/env python3
"""Real files of the kind a user brings, made by real PyTorch and numpy, for the tests of
"your own model and data" (tests/integration/orchestrator/own_model_test.cc).

    own_model_files.py model KIND OUT.pt
    own_model_files.py data KIND DIR [--train N] [--test N]
    own_model_files.py bad KIND DIR      # writes a broken data set (or model) of that kind to DIR

Models (KIND): mlp (the example's normalising MLP), cnn_bn (a convolutional network with
BatchNorm, whose running statistics are buffers), mlp_twin and resnet20_twin (the built-in mlp and
resnet20, parameter names and all, without the example's normalisation: the built-in data sets
normalise), regression (8 features to 1 value), multilabel (16 features to 3 logits), frozen (no
trainable parameter), tuple (forward returns a tuple), mlp5 (5 logits, for 10 classes), state_dict
(torch.save of a state dict: a PyTorch file, not TorchScript).

Data (KIND): fmnist (Fashion-MNIST from Debian's dataset-fashion-mnist: uint8 [N, 1, 28, 28] and
int64 labels), regression (float32 [N, 8], float32 targets y = x.w + noise), multilabel (float32
[N, 16], float32 0/1 targets [N, 3]).
"""
import argparse
import gzip
import os
import shutil
import sys

import numpy as np
import torch

MEAN, STD = 0.2860, 0.3530
FMNIST = "/usr/share/datasets/fashion-mnist"


class Mlp(torch.nn.Module):
    __constants__ = ["mean", "std", "normalise"]

    def __init__(self, classes: int = 10, normalise: bool = True):
        super().__init__()
        self.mean, self.std, self.normalise = MEAN, STD, normalise
        self.fc1 = torch.nn.Linear(28 * 28, 256)
        self.fc2 = torch.nn.Linear(256, 128)
        self.fc3 = torch.nn.Linear(128, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.normalise:
            x = (x - self.mean) / self.std
        x = torch.relu(self.fc1(x.flatten(1)))
        x = torch.relu(self.fc2(x))
        return self.fc3(x)


class CnnBn(torch.nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8 * 14 * 14, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn(self.conv(x)))
        return self.fc(torch.nn.functional.max_pool2d(x, 2).flatten(1))


def conv3x3(cin: int, cout: int, stride: int) -> torch.nn.Conv2d:
    return torch.nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


class BasicBlock(torch.nn.Module):
    """The built-in BasicBlock (services/common/ml/models.cc), name for name."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = conv3x3(cin, cout, stride)
        self.bn1 = torch.nn.BatchNorm2d(cout)
        self.conv2 = conv3x3(cout, cout, 1)
        self.bn2 = torch.nn.BatchNorm2d(cout)
        self.project = stride != 1 or cin != cout
        if self.project:
            self.shortcut_conv = torch.nn.Conv2d(cin, cout, 1, stride=stride, bias=False)
            self.shortcut_bn = torch.nn.BatchNorm2d(cout)
        else:
            self.shortcut_conv = torch.nn.Identity()
            self.shortcut_bn = torch.nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + self.shortcut_bn(self.shortcut_conv(x)))


class ResNet20(torch.nn.Module):
    def __init__(self, channels: int = 1, classes: int = 10):
        super().__init__()
        self.conv = conv3x3(channels, 16, 1)
        self.bn = torch.nn.BatchNorm2d(16)
        blocks, cin = [], 16
        for cout in (16, 32, 64):
            for b in range(3):
                blocks.append(BasicBlock(cin, cout, 2 if b == 0 and cout != 16 else 1))
                cin = cout
        self.layers = torch.nn.Sequential(*blocks)
        self.fc = torch.nn.Linear(64, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn(self.conv(x)))
        x = self.layers(x)
        return self.fc(torch.nn.functional.adaptive_avg_pool2d(x, (1, 1)).flatten(1))


class Tuple(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(28 * 28, 10)

    def forward(self, x: torch.Tensor):
        y = self.fc(x.flatten(1))
        return y, y


def make_model(kind: str, out: str) -> None:
    torch.manual_seed(1)
    if kind == "state_dict":
        torch.save(Mlp().state_dict(), out)
        return
    models = {
        "mlp": lambda: Mlp(),
        "mlp_twin": lambda: Mlp(normalise=False),
        "mlp5": lambda: Mlp(classes=5),
        "cnn_bn": CnnBn,
        "resnet20_twin": ResNet20,
        "regression": lambda: torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(),
                                                  torch.nn.Linear(32, 1)),
        "multilabel": lambda: torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                                  torch.nn.Linear(32, 3)),
        "tuple": Tuple,
        "frozen": lambda: Mlp(),
    }
    model = models[kind]()
    if kind == "frozen":
        for p in model.parameters():
            p.requires_grad_(False)
    torch.jit.script(model).save(out)


def read_idx(path: str) -> np.ndarray:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def fmnist(name: str) -> np.ndarray:
    for candidate in (name + ".gz", name):
        path = os.path.join(FMNIST, candidate)
        if os.path.exists(path):
            return read_idx(path)
    raise SystemExit(f"missing {FMNIST}/{name}")


def save_split(directory: str, split: str, x: np.ndarray, y: np.ndarray) -> None:
    np.save(os.path.join(directory, f"{split}_x.npy"), np.ascontiguousarray(x))
    np.save(os.path.join(directory, f"{split}_y.npy"), np.ascontiguousarray(y))


def make_data(kind: str, directory: str, train: int, test: int) -> None:
    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(7)
    if kind == "fmnist":
        x = fmnist("train-images-idx3-ubyte")[:, None]
        y = fmnist("train-labels-idx1-ubyte").astype(np.int64)
        save_split(directory, "train", x[:train], y[:train])
        x = fmnist("t10k-images-idx3-ubyte")[:, None]
        y = fmnist("t10k-labels-idx1-ubyte").astype(np.int64)
        save_split(directory, "test", x[:test], y[:test])
    elif kind == "regression":
        w = rng.normal(size=8).astype(np.float32)
        for split, n in (("train", train), ("test", test)):
            x = rng.normal(size=(n, 8)).astype(np.float32)
            y = (x @ w + 0.1 * rng.normal(size=n)).astype(np.float32)
            save_split(directory, split, x, y)
    elif kind == "multilabel":
        w = rng.normal(size=(16, 3)).astype(np.float32)
        for split, n in (("train", train), ("test", test)):
            x = rng.normal(size=(n, 16)).astype(np.float32)
            y = ((x @ w) > 0).astype(np.float32)
            save_split(directory, split, x, y)
    else:
        raise SystemExit(f"unknown data kind {kind}")


def make_bad(kind: str, directory: str) -> None:
    """A small good data set, then broken as `kind` says."""
    base = "regression" if kind == "nan_targets" else "fmnist"
    make_data(base, directory, 400, 100)
    x_path = os.path.join(directory, "train_x.npy")
    y_path = os.path.join(directory, "train_y.npy")
    if kind == "truncated":
        with open(x_path, "r+b") as f:
            f.truncate(os.path.getsize(x_path) - 1000)
    elif kind == "lying_header":
        with open(x_path, "ab") as f:
            f.write(b"\0" * 784)  # one example more than the header declares
    elif kind == "dtype":
        np.save(x_path, np.load(x_path).astype(np.int16))
    elif kind == "fortran":
        np.save(x_path, np.asfortranarray(np.load(x_path).reshape(400, 784)))
    elif kind == "length_mismatch":
        np.save(y_path, np.load(y_path)[:399])
    elif kind == "nan_features":
        x = np.load(x_path).astype(np.float32) / 255
        x[123, 0, 5, 5] = np.nan
        np.save(x_path, x)
    elif kind == "nan_targets":
        y = np.load(y_path)
        y[17] = np.inf
        np.save(y_path, y)
    elif kind == "label_out_of_range":
        y = np.load(y_path)
        y[17] = 12
        np.save(y_path, y)
    elif kind == "no_test_files":
        os.remove(os.path.join(directory, "test_x.npy"))
        os.remove(os.path.join(directory, "test_y.npy"))
    else:
        raise SystemExit(f"unknown bad kind {kind}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=["model", "data", "bad"])
    parser.add_argument("kind")
    parser.add_argument("out")
    parser.add_argument("--train", type=int, default=2000)
    parser.add_argument("--test", type=int, default=500)
    args = parser.parse_args()
    if args.what == "model":
        make_model(args.kind, args.out)
    elif args.what == "data":
        make_data(args.kind, args.out, args.train, args.test)
    else:
        make_bad(args.kind, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
