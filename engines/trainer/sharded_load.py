"""Each rank's rows of a checkpoint, read straight into its sharded parameters.

Under fsdp2 / fsdp2_ep the lane builds the model with its parameters on the meta device
(`engines/model/load.py` `empty_moe_causal_lm`: no weights in memory), slices and shards
it (parallelize.py), and only then gives each parameter storage on the rank's device and
fills it here: the rows FSDP2 gave this rank (`torch.chunk` of dim 0 over the
parameter's mesh), offset by the experts this rank holds under expert parallel, read from
the safetensors files with `get_slice`, so only those bytes leave the files. Peak host
memory per rank is then about its share of the model, not the whole of it in fp32.

Checkpoints store a family's fused expert tensors as one tensor per expert; transformers'
own conversion mapping for the model type (`get_checkpoint_conversion_mapping`) says how
they fuse: per-expert tensors stacked (MergeModulelist, dim 0), then gate and up joined
(Concatenate). Only the rank's experts are read and fused. A mapping with another
operation is refused with its name (transformers loads such a family whole, under ddp).
A block-FP8 checkpoint (GLM-5's format, and export.py's `fp8`) is de-quantised row by
row with the scales of the blocks those rows fall in, so a rank never holds another's.
Buffers the checkpoint holds (DeepSeek's router correction bias) are read whole; the
others (rotary tables) were computed for real when the model was built and are kept.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch
import torch.distributed as dist
from safetensors import safe_open
from torch import nn
from torch.distributed.tensor import DTensor, Shard
from transformers.conversion_mapping import get_checkpoint_conversion_mapping
from transformers.core_model_loading import Concatenate, MergeModulelist, WeightConverter, WeightRenaming

from engines.trainer.expert_parallel import ExpertParallel


class CheckpointReader:
    """Rows of the tensors of one safetensors checkpoint (one file or an index of files)."""

    def __init__(self, model_dir: str | Path) -> None:
        folder = Path(model_dir)
        index = folder / "model.safetensors.index.json"
        if index.is_file():
            files = json.loads(index.read_text())["weight_map"]
            self.files = {k: folder / f for k, f in files.items()}
        else:
            self.files = {}
            for path in sorted(folder.glob("*.safetensors")):
                with safe_open(path, "pt") as handle:
                    self.files.update({k: path for k in handle.keys()})  # noqa: SIM118 (a safetensors handle is not iterable)
        if not self.files:
            raise FileNotFoundError(f"{folder} holds no safetensors weights: export the model with save_pretrained")
        self.block = fp8_block(folder)
        self._open: dict[Path, object] = {}

    def __contains__(self, key: str) -> bool:
        return key in self.files

    def _slice(self, key: str):  # safetensors' lazy view of one tensor
        path = self.files[key]
        if path not in self._open:
            self._open[path] = safe_open(path, "pt")
        return self._open[path].get_slice(key)  # type: ignore[attr-defined]

    def shape(self, key: str) -> list[int]:
        return self._slice(key).get_shape()

    def rows(self, key: str, start: int, stop: int) -> torch.Tensor:
        """Rows [start, stop) of tensor `key` (all of a 0-d tensor); a block-FP8 weight
        de-quantised with the scales of its blocks of those rows, in float32."""
        piece = self._slice(key)
        if not piece.get_shape():
            return piece[:]
        rows = piece[start:stop]
        scales = key + "_scale_inv"
        if self.block is None or scales not in self.files or stop <= start:
            return rows
        b = self.block
        first, last = start // b, (stop - 1) // b + 1
        s = self._slice(scales)[first:last].float()
        s = s.repeat_interleave(b, 0)[start - first * b : stop - first * b].repeat_interleave(b, 1)
        return rows.float() * s[:, : rows.shape[1]]


def fp8_block(model_dir: str | Path) -> int | None:
    """The block size of a block-FP8 checkpoint (config.json's quantization_config, as
    engines/trainer/export.py writes it and GLM-5's is), None for an unquantised one;
    another quantisation is refused by name."""
    path = Path(model_dir) / "config.json"
    quant = json.loads(path.read_text()).get("quantization_config") if path.is_file() else None
    if not quant:
        return None
    block = quant.get("weight_block_size") or []
    if quant.get("quant_method") != "fp8" or len(block) != 2 or block[0] != block[1]:
        raise ValueError(
            f"{model_dir}: quantization {quant.get('quant_method')!r} with blocks {block} cannot be read for training; "
            "give an unquantised checkpoint or a block-FP8 one (quant_method fp8, square weight_block_size)"
        )
    return int(block[0])


def fill_sharded(model: nn.Module, model_dir: str | Path, device: torch.device, ep: ExpertParallel | None) -> None:
    """Give every parameter of `model` (on the meta device, sharded) storage on `device`
    and fill it with its rows of the checkpoint in `model_dir`. Under expert parallel
    (`ep`) a sliced expert tensor's rows start at this rank's first expert."""
    buffers = {name: b.detach().clone() for name, b in model.named_buffers()}
    model.to_empty(device=device)
    reader = CheckpointReader(model_dir)
    renames, converters = _mapping(getattr(model.config, "model_type", ""))
    expert_rank = dist.get_rank(ep.group) if ep is not None else 0
    with torch.no_grad():
        for name, b in model.named_buffers():  # the checkpoint's where it has them (a router's bias)
            b.copy_(_whole(name, reader, renames) if _has(name, reader, renames) else buffers[name])
        for name, p in model.named_parameters():
            start, stop = _local_rows(p)
            if ep is not None and name in ep.keys:
                offset = expert_rank * p.shape[0]  # this rank's slice of the checkpoint's experts
                start, stop = start + offset, stop + offset
            local = p.to_local() if isinstance(p, DTensor) else p
            local.copy_(_read(name, start, stop, reader, renames, converters))


def _local_rows(p: torch.Tensor) -> tuple[int, int]:
    """The rows of dim 0 this rank holds: FSDP2's `torch.chunk` of the parameter over its mesh."""
    n = p.shape[0] if p.dim() else 0
    if not isinstance(p, DTensor):
        return 0, n
    if tuple(p.placements) != (Shard(0),):
        raise ValueError(f"sharded load reads dim-0 shards only; a parameter is placed {p.placements}")
    world, rank = p.device_mesh.size(), p.device_mesh.get_local_rank()
    chunk = -(-n // world)
    start = min(n, rank * chunk)
    stop = min(n, start + chunk)
    if p.to_local().shape[0] != stop - start:
        raise ValueError(f"local shard has {p.to_local().shape[0]} rows, torch.chunk gives {stop - start}")
    return start, stop


def _mapping(model_type: str) -> tuple[list[tuple[str, str]], list[WeightConverter]]:
    """(renamings as (checkpoint text, module text), expert converters) of a model type."""
    renames, converters = [], []
    for entry in get_checkpoint_conversion_mapping(model_type) or []:
        if isinstance(entry, WeightConverter):
            for op in entry.operations:
                if not (isinstance(op, MergeModulelist) and op.dim == 0) and not isinstance(op, Concatenate):
                    raise ValueError(
                        f"{model_type}: transformers fuses its checkpoint with {type(op).__name__}, which the sharded "
                        "load does not read; train it with trainer.parallelism = 'ddp'"
                    )
            converters.append(entry)
        elif isinstance(entry, WeightRenaming):
            renames += list(zip(entry.source_patterns, entry.target_patterns))
    return renames, converters


def _checkpoint_key(name: str, reader: CheckpointReader, renames: list[tuple[str, str]]) -> str:
    """`name` as the checkpoint writes it: as is, or with the family's renamings undone."""
    if name in reader:
        return name
    for checkpoint_text, module_text in renames:
        key = re.sub(re.escape(module_text), checkpoint_text.replace("\\", "\\\\"), name)
        if key in reader:
            return key
    raise KeyError(f"the checkpoint has no tensor for parameter {name}")


def _read(
    name: str,
    start: int,
    stop: int,
    reader: CheckpointReader,
    renames: list[tuple[str, str]],
    converters: list[WeightConverter],
) -> torch.Tensor:
    """Rows [start, stop) of parameter `name`: straight from its tensor, or fused from the
    per-expert tensors of those rows' experts."""
    for conv in converters:
        target = conv.target_patterns[0]
        if name.endswith(target):
            prefix = name[: -len(target)]
            if stop <= start:
                return torch.empty(0)
            stacked = [
                torch.stack([_whole(prefix + source.replace("*", str(e)), reader, renames) for e in range(start, stop)])
                for source in conv.source_patterns
            ]
            concat = next((op for op in conv.operations if isinstance(op, Concatenate)), None)
            return torch.cat(stacked, dim=concat.dim) if concat is not None else stacked[0]
    key = _checkpoint_key(name, reader, renames)
    return reader.rows(key, start, stop)


def _has(name: str, reader: CheckpointReader, renames: list[tuple[str, str]]) -> bool:
    try:
        _checkpoint_key(name, reader, renames)
    except KeyError:
        return False
    return True


def _whole(name: str, reader: CheckpointReader, renames: list[tuple[str, str]]) -> torch.Tensor:
    """All of one tensor (a per-expert one, a buffer)."""
    key = _checkpoint_key(name, reader, renames)
    shape = reader.shape(key)
    return reader.rows(key, 0, shape[0] if shape else 0)
