"""Quickstart: compile a small model with mybackend, check it against eager,
and print what ran where and how long compiling took."""

from __future__ import annotations

import time

import torch
from torch import nn

import mybackend


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(64, 128), nn.GELU(), nn.LayerNorm(128), nn.Linear(128, 10)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.body(x), dim=-1)


def main() -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = Net().to(device)
    x = torch.randn(32, 64, device=device)
    compiled = torch.compile(model, backend="mybackend")

    start = time.perf_counter()
    out = compiled(x)  # first call: dynamo, aot_autograd, lowering and the C++ core compile
    first_call = time.perf_counter() - start
    out.sum().backward()  # the backward graph compiles on first use

    expected = model(x)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)
    print(f"device: {device}; CUDA kernels built: {mybackend.cuda_enabled()}")
    print(f"matches eager; first call (compile + run) took {first_call:.2f} s")
    print()
    print(mybackend.explain(model, x))


if __name__ == "__main__":
    main()
