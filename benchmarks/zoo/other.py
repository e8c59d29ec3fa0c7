"""Hand-built models outside the transformer and CNN families: recurrent
networks, a UNet, a recommender, torch.nn's own transformer encoder, and a
model with data-dependent Python (graph breaks)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from benchmarks.spec import ModelSpec, images, tokens
from benchmarks.zoo._common import entry, sequences

FAMILY = "other"


class LSTMLanguageModel(nn.Module):
    """Embedding, a stacked nn.LSTM and a vocabulary projection: next-token logits.

    Dynamo does not trace nn.LSTM or nn.GRU (``torch._dynamo.config.allow_rnn``
    is off): the frame runs eagerly under every backend, and a training step
    compiles only the loss. These rows measure that fallback; ``UnrolledLSTM``
    is the compiled counterpart."""

    def __init__(self, vocab: int, embed: int, hidden: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.embed(ids))
        return self.head(out)  # type: ignore[no-any-return]


def lstm_lm(tiny: bool) -> nn.Module:
    """2-layer LSTM language model, width 1024 over 512-wide embeddings (tiny: 64 over 32)."""
    return LSTMLanguageModel(500, 32, 64, 2) if tiny else LSTMLanguageModel(10000, 512, 1024, 2)


class UnrolledLSTM(nn.Module):
    """An LSTM language model written out: the input projection of every step
    at once, then one recurrent matmul and the gate arithmetic per step in a
    Python loop, which Dynamo unrolls into one graph (nn.LSTM it does not
    trace: ``torch._dynamo.config.allow_rnn`` is off)."""

    def __init__(self, vocab: int, width: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.inputs = nn.ModuleList(nn.Linear(width, 4 * width) for _ in range(layers))
        self.recurrent = nn.ModuleList(
            nn.Linear(width, 4 * width, bias=False) for _ in range(layers)
        )
        self.head = nn.Linear(width, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for project, recur in zip(self.inputs, self.recurrent, strict=True):
            gates_in = project(x)  # (batch, steps, 4 * width)
            h = c = x.new_zeros(x.shape[0], x.shape[2])
            outs = []
            for t in range(x.shape[1]):
                i, f, g, o = (gates_in[:, t] + recur(h)).chunk(4, dim=-1)
                c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                h = torch.sigmoid(o) * torch.tanh(c)
                outs.append(h)
            x = torch.stack(outs, dim=1)
        return self.head(x)  # type: ignore[no-any-return]


def lstm_unrolled(tiny: bool) -> nn.Module:
    """``UnrolledLSTM``: 2 layers of width 512 over 64 tokens (tiny: 32 over 8)."""
    return UnrolledLSTM(500, 32, 2) if tiny else UnrolledLSTM(10000, 512, 2)


class GRUClassifier(nn.Module):
    """A bidirectional nn.GRU over feature frames, mean-pooled, then a linear classifier."""

    def __init__(self, features: int, hidden: int, layers: int, classes: int) -> None:
        super().__init__()
        self.gru = nn.GRU(features, hidden, num_layers=layers, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * hidden, classes)

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        out, _ = self.gru(frames)
        return self.head(out.mean(1))  # type: ignore[no-any-return]


def gru_classifier(tiny: bool) -> nn.Module:
    """Bidirectional 2-layer GRU (width 512) over 200 frames of 80 features, 35 classes."""
    return GRUClassifier(16, 32, 2, 10) if tiny else GRUClassifier(80, 512, 2, 35)


class _ConvBlock(nn.Sequential):
    """Two 3x3 convolutions, each followed by GroupNorm and SiLU."""

    def __init__(self, cin: int, cout: int, groups: int) -> None:
        super().__init__(
            nn.Conv2d(cin, cout, 3, padding=1),
            nn.GroupNorm(groups, cout),
            nn.SiLU(),
            nn.Conv2d(cout, cout, 3, padding=1),
            nn.GroupNorm(groups, cout),
            nn.SiLU(),
        )


class UNet(nn.Module):
    """A UNet: conv blocks with GroupNorm, stride-2 max-pool down, bilinear
    upsampling and skip concatenation up, a 1x1 output convolution."""

    def __init__(self, widths: tuple[int, ...], groups: int, channels: int = 3) -> None:
        super().__init__()
        self.down = nn.ModuleList()
        cin = channels
        for width in widths:
            self.down.append(_ConvBlock(cin, width, groups))
            cin = width
        self.pool = nn.MaxPool2d(2)
        self.upsample = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.up = nn.ModuleList(
            _ConvBlock(deep + skip, skip, groups)
            for deep, skip in zip(widths[:0:-1], widths[-2::-1], strict=True)
        )
        self.out = nn.Conv2d(widths[0], channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for i, block in enumerate(self.down):
            x = block(x if i == 0 else self.pool(x))
            skips.append(x)
        skips.pop()
        for block in self.up:
            x = block(torch.cat([self.upsample(x), skips.pop()], dim=1))
        return self.out(x)  # type: ignore[no-any-return]


def unet(tiny: bool) -> nn.Module:
    """UNet with widths 64-512 on 256x256 images (tiny: 8-32 on 32x32); MSE to a random image."""
    return UNet((8, 16, 32), groups=4) if tiny else UNet((64, 128, 256, 512), groups=32)


class DataDependent(nn.Module):
    """A small conv net whose Python looks at its data: a branch on a tensor's
    value (``if x.abs().mean() > 0.5``), a Python float from ``.item()`` that
    rescales, and a loop whose trip count comes from ``.item()``. Dynamo breaks
    the graph at each. The decisions read the input, which a benchmark row
    holds fixed, so steps do not recompile (a float from the weights would:
    Dynamo guards on its value); their conditions sit far from the thresholds
    for random-normal inputs (0.8 against 0.5, 1.0 against 0.5), so every
    precision and backend takes the same path."""

    def __init__(self, width: int, classes: int) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, width, 3, stride=2, padding=1)
        self.positive = nn.Conv2d(width, width, 3, padding=1)
        self.negative = nn.Conv2d(width, width, 3, padding=1)
        self.refine = nn.Conv2d(width, width, 3, padding=1)
        self.norm = nn.BatchNorm2d(width)
        self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.stem(x)
        if x.abs().mean() > 0.5:  # noqa: SIM108 (a tensor in a Python if statement)
            h = F.relu(self.positive(h))
        else:
            h = F.gelu(self.negative(h))
        peak = x.abs().amax().item()  # a Python float from the data
        h = self.norm(h / (1.0 + peak))
        for _ in range(1 + int(x.std().item() > 0.5)):  # a data-dependent trip count
            h = h + F.relu(self.refine(h))
        return self.head(h.mean((2, 3)))  # type: ignore[no-any-return]


def graph_breaks(tiny: bool) -> nn.Module:
    """``DataDependent`` with 128 channels (tiny: 8)."""
    return DataDependent(8, 10) if tiny else DataDependent(128, 1000)


def nn_transformer(tiny: bool) -> nn.Module:
    """torch.nn.TransformerEncoder, 6 pre-norm layers of width 512 (tiny: 2 of 32),
    on feature sequences: torch's own attention and, in inference, its fused
    encoder-layer fast path."""
    width, heads, layers = (32, 2, 2) if tiny else (512, 8, 6)
    layer = nn.TransformerEncoderLayer(
        width, heads, 4 * width, dropout=0.0, batch_first=True, norm_first=True
    )
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)


class DLRM(nn.Module):
    """DLRM-style recommender: a bottom MLP on dense features, one sum-pooled
    nn.EmbeddingBag per sparse feature, pairwise dot-product interactions, a
    top MLP to one click logit."""

    left: torch.Tensor
    right: torch.Tensor

    def __init__(self, dense: int, tables: int, rows: int, dim: int, hidden: int) -> None:
        super().__init__()
        self.bottom = nn.Sequential(
            nn.Linear(dense, hidden), nn.ReLU(), nn.Linear(hidden, dim), nn.ReLU()
        )
        self.embeddings = nn.ModuleList(
            nn.EmbeddingBag(rows, dim, mode="sum") for _ in range(tables)
        )
        left, right = torch.triu_indices(tables + 1, tables + 1, offset=1)
        self.register_buffer("left", left, persistent=False)
        self.register_buffer("right", right, persistent=False)
        pairs = (tables + 1) * tables // 2
        self.top = nn.Sequential(
            nn.Linear(dim + pairs, hidden), nn.ReLU(), nn.Linear(hidden, hidden // 2), nn.ReLU(),
            nn.Linear(hidden // 2, 1),
        )  # fmt: skip

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        x = self.bottom(dense)
        pooled = [bag(sparse[:, i]) for i, bag in enumerate(self.embeddings)]
        z = torch.stack([x, *pooled], dim=1)
        pairs = torch.bmm(z, z.transpose(1, 2))[:, self.left, self.right]
        return self.top(torch.cat([x, pairs], dim=1))  # type: ignore[no-any-return]


def dlrm(tiny: bool) -> nn.Module:
    """26 tables of 100k rows x 64, 13 dense features, MLPs of 512 (tiny: 4 tables of 100 x 8)."""
    return DLRM(13, 4, 100, 8, 32) if tiny else DLRM(13, 26, 100_000, 64, 512)


def _recsys_inputs(batch: int, tiny: bool, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    """Dense features (batch, 13) and per-table bags of ids (batch, tables, 8)."""
    tables, rows = (4, 100) if tiny else (26, 100_000)
    dense = torch.randn(batch, 13, generator=gen)
    return dense, torch.randint(0, rows, (batch, tables, 8), generator=gen)


SPECS: tuple[ModelSpec, ...] = (
    entry("lstm_lm", FAMILY, ["rnn", "lstm"], lstm_lm, tokens(128, 16, 10000, 500),
          train_batch=64, throughput_batch=64),
    entry("lstm_unrolled", FAMILY, ["rnn", "lstm", "unrolled"], lstm_unrolled,
          tokens(64, 8, 10000, 500), train_batch=64, throughput_batch=64),
    entry("gru_classifier", FAMILY, ["rnn", "gru"], gru_classifier,
          sequences(steps=(200, 16), width=(80, 16)), train_batch=64, throughput_batch=64),
    entry("unet", FAMILY, ["unet", "group_norm", "upsampling"], unet, images(256, 32),
          train_batch=16, throughput_batch=16, loss="mse"),
    entry("graph_breaks", FAMILY, ["graph_break", "data_dependent"], graph_breaks,
          images(224, 32), train_batch=64, throughput_batch=32),
    entry("nn_transformer", FAMILY, ["torch_nn_transformer"], nn_transformer,
          sequences(steps=(256, 16), width=(512, 32)), train_batch=32, throughput_batch=32,
          loss="square"),
    entry("dlrm", FAMILY, ["recsys", "embedding_bag"], dlrm, _recsys_inputs,
          train_batch=2048, throughput_batch=512, loss="mse"),
)  # fmt: skip
