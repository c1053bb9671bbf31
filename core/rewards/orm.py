"""The outcome reward model (ORM): P(the response is correct | prompt + response token ids).

A small bidirectional transformer encoder over the exact ids (learned token + position
embeddings, pre-norm layers, mean-pooled over real tokens) with a linear head; the component is
σ(logit) ∈ (0, 1). It is trained with binary cross-entropy on verified rollouts
(``core.rewards.data``): the verifier's verdict is the label. Its directory holds
``model.safetensors`` and ``config.json`` (architecture, tokenizer revision, vocabulary hash,
chat template, held-out accuracy, sources); loading checks compatibility like a teacher's.
Simplification: no learning-rate schedule; the held-out split is every 10th rollout.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from core.model.checkpoint import file_sha256
from core.rollout.engine import left_pad
from core.teachers.compat import check_compatible


@dataclass(frozen=True)
class OrmArch:
    """ORM architecture."""

    vocab_size: int = 320
    dim: int = 64
    layers: int = 2
    heads: int = 4
    ffn: int = 128
    max_len: int = 64


class OutcomeRewardModel(nn.Module):
    def __init__(self, arch: OrmArch) -> None:
        super().__init__()
        self.arch = arch
        self.tok = nn.Embedding(arch.vocab_size, arch.dim)
        self.pos = nn.Embedding(arch.max_len, arch.dim)
        layer = nn.TransformerEncoderLayer(
            arch.dim, arch.heads, arch.ffn, dropout=0.0, batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, arch.layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(arch.dim)
        self.head = nn.Linear(arch.dim, 1)

    def forward(self, ids: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """ids [B, T] int64 (left-padded), valid [B, T] bool -> logits [B] fp32."""
        pos = (valid.long().cumsum(1) - 1).clamp_min(0)  # [B, T] positions from the first token
        x = self.tok(ids) + self.pos(pos)  # [B, T, D]
        x = self.encoder(x, src_key_padding_mask=~valid)
        x = self.norm(x)
        m = valid[..., None].to(x.dtype)
        pooled = (x * m).sum(1) / m.sum(1).clamp_min(1.0)  # [B, D]
        return self.head(pooled)[:, 0]

    @torch.no_grad()
    def score(self, seqs: list[list[int]], *, pad_id: int) -> torch.Tensor:
        """P(correct) [B] fp32 of token-id sequences."""
        self.eval()
        ids, valid = left_pad(seqs, pad_id)
        return torch.sigmoid(self(ids, valid))


def train_orm(
    examples: list[tuple[list[int], bool]],
    *,
    arch: OrmArch,
    pad_id: int,
    steps: int = 400,
    batch_size: int = 64,
    lr: float = 1e-3,
    seed: int = 0,
    log=print,
) -> tuple[OutcomeRewardModel, dict]:
    """Fit the ORM on (ids, verified) pairs; every 10th pair is held out. Returns the model and
    its held-out accuracy / base rate (the accuracy of always answering the majority label)."""
    if len(examples) < 10:
        raise ValueError(f"train_orm needs >= 10 verified rollouts, got {len(examples)}")
    with torch.random.fork_rng():  # seeded, without moving the caller's global generator
        torch.manual_seed(seed)
        return _train_orm(
            examples,
            arch=arch,
            pad_id=pad_id,
            steps=steps,
            batch_size=batch_size,
            lr=lr,
            seed=seed,
            log=log,
        )


def _train_orm(examples, *, arch, pad_id, steps, batch_size, lr, seed, log):
    held = examples[::10]
    train = [e for i, e in enumerate(examples) if i % 10]
    model = OutcomeRewardModel(arch)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    g = torch.Generator().manual_seed(seed)
    for step in range(steps):
        idx = torch.randint(len(train), (batch_size,), generator=g).tolist()
        ids, valid = left_pad([train[i][0] for i in idx], pad_id)
        y = torch.tensor([float(train[i][1]) for i in idx])
        model.train()
        loss = nn.functional.binary_cross_entropy_with_logits(model(ids, valid), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 100 == 0 or step == steps - 1:
            log(f"orm step {step:4d} loss {float(loss.detach()):.4f}")
    p = model.score([e[0] for e in held], pad_id=pad_id)
    labels = torch.tensor([e[1] for e in held])
    acc = float(((p > 0.5) == labels).float().mean())
    base = float(max(labels.float().mean(), 1 - labels.float().mean()))
    return model, {"heldout_accuracy": acc, "heldout_base_rate": base, "n_heldout": len(held)}


def save_orm(path: str | Path, model: OutcomeRewardModel, meta: dict) -> str:
    """Write the ORM directory; returns the weights' sha256."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().contiguous() for k, v in sorted(model.state_dict().items())}
    save_file(tensors, str(path / "model.safetensors"))
    sha = file_sha256(path / "model.safetensors")
    doc = {"kind": "orm", "arch": asdict(model.arch), "weights_sha256": sha, **meta}
    doc["vocab_size"] = model.arch.vocab_size
    (path / "config.json").write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return sha


def load_orm(path: str | Path, **student) -> OutcomeRewardModel:
    """Read an ORM directory after the compatibility check (``student``: the student's
    ``tokenizer_rev``, ``vocab_hash``, ``chat_template_rev``, ``vocab_size``)."""
    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"no ORM at {path}; train one with `closedloop rewards train-orm --runs RUN ...`"
        )
    meta = json.loads((path / "config.json").read_text())
    if meta.get("kind") != "orm":
        raise ValueError(f"{path} is not an ORM directory (kind={meta.get('kind')!r})")
    if file_sha256(path / "model.safetensors") != meta.get("weights_sha256"):
        raise ValueError(f"ORM {path}: weights sha256 differs from its config.json")
    check_compatible(f"ORM {str(path)!r}", meta, None, **student)
    with torch.random.fork_rng():  # the init is overwritten: leave the global generator alone
        model = OutcomeRewardModel(OrmArch(**meta["arch"]))
    model.load_state_dict(load_file(str(path / "model.safetensors")))
    model.eval()
    return model
