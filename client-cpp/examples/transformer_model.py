"""client-cpp/examples/transformer_model.h in Python: the same module names and the same
forward, so one component in ddod serves a C++ and a Python runner (tests/python/test_client_cpp.py,
bench/bench_client_cpp.py)."""

import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, _ = x.shape

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(batch, tokens, self.heads, -1).transpose(1, 2)

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        weights = torch.softmax(q @ k.transpose(-2, -1) * (1.0 / q.shape[-1] ** 0.5), -1)
        return self.o((weights @ v).transpose(1, 2).reshape(batch, tokens, -1))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, mlp_ratio: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp_up = nn.Linear(dim, dim * mlp_ratio)
        self.mlp_down = nn.Linear(dim * mlp_ratio, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp_down(nn.functional.gelu(self.mlp_up(self.norm2(x))))


class Transformer(nn.Module):
    """TransformerImpl (TransformerConfig's defaults: dim 768, heads 12, 4 blocks)."""

    def __init__(self, dim: int = 768, heads: int = 12, blocks: int = 4, input_dim: int = 64,
                 mlp_ratio: int = 4) -> None:
        super().__init__()
        self.embed = nn.Linear(input_dim, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, mlp_ratio) for _ in range(blocks))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, input_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for block in self.blocks:
            h = block(h)
        return self.head(self.norm(h))
