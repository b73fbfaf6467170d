"""A quantized Llama-style block, tensor-parallel with tcgemm.parallel.

    torchrun --nproc-per-node 2 -m examples.tensor_parallel          # two GPUs, NCCL
    python3 -m examples.tensor_parallel --cpu                        # two CPU processes, gloo

Every rank builds the same float block (attention projections and a SwiGLU MLP), quantizes it
with ``tcgemm.quantize_model``, and shards it with a plan of tcgemm styles as the torch
tensor-parallel tutorial shards a Llama block: q, k, v, gate and up column-wise, o and down
row-wise. Rank 0 prints the largest difference of the sharded block's output from the unsharded
quantized block's, and what each rank holds.
"""

from __future__ import annotations

import argparse
import os
import tempfile

import torch
from torch import nn

DIM, HIDDEN, HEADS, KV_HEADS = 1024, 2816, 8, 4


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        head = DIM // HEADS
        self.q_proj = nn.Linear(DIM, HEADS * head, bias=False)
        self.k_proj = nn.Linear(DIM, KV_HEADS * head, bias=False)
        self.v_proj = nn.Linear(DIM, KV_HEADS * head, bias=False)
        self.o_proj = nn.Linear(HEADS * head, DIM, bias=False)
        self.gate_proj = nn.Linear(DIM, HIDDEN, bias=False)
        self.up_proj = nn.Linear(DIM, HIDDEN, bias=False)
        self.down_proj = nn.Linear(HIDDEN, DIM, bias=False)
        self.head = head

    def forward(self, x):
        b, t, _ = x.shape
        # The heads follow the projections' local widths: a column-wise shard holds whole heads.
        q = self.q_proj(x).view(b, t, -1, self.head).transpose(1, 2)
        k = self.k_proj(x).view(b, t, -1, self.head).transpose(1, 2)
        v = self.v_proj(x).view(b, t, -1, self.head).transpose(1, 2)
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
        a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o_proj(a.transpose(1, 2).reshape(b, t, -1))
        return x + self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


def run(rank: int, world: int, device: str, init_method: str, backend: str) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    import tcgemm
    from tcgemm.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    if device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world)
    mesh = init_device_mesh(device, (world,))
    dtype = torch.bfloat16 if device == "cuda" else torch.float32

    def quantized_block():
        torch.manual_seed(0)  # the same float weights on every rank
        b = Block().to(device=device, dtype=dtype)
        tcgemm.quantize_model(b, scheme="w8a8-block")  # per-block activations: shards quantize as the whole
        return b

    block, whole = quantized_block(), quantized_block()

    plan = {name: ColwiseParallel() for name in ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")}
    plan.update(o_proj=RowwiseParallel(), down_proj=RowwiseParallel())
    parallelize_module(block, mesh, plan)

    x = torch.randn(2, 16, DIM, generator=torch.Generator().manual_seed(1)).to(device=device, dtype=dtype)
    with torch.no_grad():
        y_tp, y_whole = block(x), whole(x)
    diff = (y_tp.float() - y_whole.float()).abs().max().item()
    if rank == 0:
        print(f"{world} ranks ({backend}): the sharded block's output differs from the whole block's by at most "
              f"{diff:.3g} (largest |y| {y_whole.float().abs().max().item():.3g})")
        print(f"rank 0 holds {block.gate_proj}")
        print(f"rank 0 holds {block.down_proj}")
    dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cpu", action="store_true", help="two CPU processes over gloo instead of torchrun's GPUs")
    args = p.parse_args()
    if not args.cpu:  # started by torchrun: one process per GPU
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        run(rank, world, "cuda", "env://", "nccl")
        return
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as folder:
        mp.spawn(run, args=(2, "cpu", f"file://{folder}/store", "gloo"), nprocs=2)


if __name__ == "__main__":
    main()
