"""Tensor-parallel QuantLinear blocks: TP=1 against TP=2 (and 4), one process per GPU over NCCL.

    python3 -m benchmarks.bench_tp [--tp 2] [--rows 1,16,2048] [--scheme w8a8] [--json PATH]

TP=1 runs on the first GPU alone, TP=N on N GPUs. Blocks of Llama-3-8B shapes, quantized with tcgemm (``--scheme``) and sharded with
``tcgemm.parallel``'s styles as the torch tensor-parallel tutorial shards a Llama block:
- MLP: gate_proj and up_proj (4096 -> 14336) column-wise, SiLU(gate) * up, down_proj
  (14336 -> 4096) row-wise (one all-reduce);
- attention projections: q_proj (4096 -> 4096), k_proj and v_proj (4096 -> 1024) column-wise,
  o_proj (4096 -> 4096) row-wise on q's output (the attention itself left out; one all-reduce).

Each block runs as one CUDA graph (NCCL's all-reduce captured with it); the time is the median
over bursts of replays between CUDA events on rank 0, the TP sizes timed in rotated rounds, all
ranks starting each burst together (a barrier). The all-reduce's share is the same graph
measurement of the block's all-reduce alone (M x 4096 bf16) over its time. The weights of one
block (88-176 MB in int8 at TP=1) exceed the L2 cache, so repeated calls read them from memory.
NVLink multicast (NVLS) is left off. Needs as many GPUs as the largest TP size.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

import torch
import torch.multiprocessing as mp
from torch import nn

from benchmarks import report, timing

DIM, HIDDEN, KV = 4096, 14336, 1024
ROUNDS, BURSTS, REPLAYS = 3, 5, 20


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_proj = nn.Linear(DIM, HIDDEN, bias=False)
        self.up_proj = nn.Linear(DIM, HIDDEN, bias=False)
        self.down_proj = nn.Linear(HIDDEN, DIM, bias=False)

    def forward(self, x):
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))

    plan = {"gate_proj": "colwise", "up_proj": "colwise", "down_proj": "rowwise"}


class AttentionProjections(nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj = nn.Linear(DIM, DIM, bias=False)
        self.k_proj = nn.Linear(DIM, KV, bias=False)
        self.v_proj = nn.Linear(DIM, KV, bias=False)
        self.o_proj = nn.Linear(DIM, DIM, bias=False)

    def forward(self, x):
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        return self.o_proj(q), k, v

    plan = {"q_proj": "colwise", "k_proj": "colwise", "v_proj": "colwise", "o_proj": "rowwise"}


BLOCKS = {"8B MLP": MLP, "8B attention projections": AttentionProjections}


def _block(cls, scheme: str, mesh, tp: int, device):
    import tcgemm
    from tcgemm import parallel

    torch.manual_seed(0)
    block = cls().to(device=device, dtype=torch.bfloat16)
    tcgemm.quantize_model(block, scheme=scheme)
    if tp > 1:
        styles = {"colwise": parallel.ColwiseParallel, "rowwise": parallel.RowwiseParallel}
        parallel.parallelize_module(block, mesh, {name: styles[s]() for name, s in cls.plan.items()})
    return block


def _burst_us(graph, group=None) -> float:
    """Device time per replay of a burst; with a group, its ranks start the burst together."""
    import torch.distributed as dist

    if group is not None:
        dist.barrier(group=group)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(REPLAYS):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / REPLAYS


def _worker(rank: int, world: int, folder: str, args) -> None:
    """TP=1 on rank 0 alone, TP=world on every rank, in rotated rounds."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    import tcgemm.parallel as parallel

    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    dist.init_process_group("nccl", init_method=f"file://{folder}/store", rank=rank, world_size=world,
                            device_id=device)
    mesh = init_device_mesh("cuda", (world,))
    group = mesh.get_group()
    rows_out = []
    for name, cls in BLOCKS.items():
        for m in args.rows:
            x = torch.randn(m, DIM, device=device, dtype=torch.bfloat16)
            y = torch.zeros(m, DIM, device=device, dtype=torch.bfloat16)
            sharded = _block(cls, args.scheme, mesh, world, device)
            graphs, whole = {}, None
            with torch.no_grad():
                graphs[world] = timing.capture_graph(lambda: sharded(x))
                reduce_graph = timing.capture_graph(lambda: parallel._all_reduce_sum(y, group))
                if rank == 0:
                    whole = _block(cls, args.scheme, None, 1, device)
                    graphs[1] = timing.capture_graph(lambda: whole(x))
            times: dict[int, list[float]] = {1: [], world: []}
            reduce_us: list[float] = []
            order = [1, world]
            for r in range(ROUNDS):
                for tp in order[r % 2:] + order[:r % 2]:
                    for _ in range(BURSTS):
                        if tp == world:
                            times[tp].append(_burst_us(graphs[tp], group))
                            reduce_us.append(_burst_us(reduce_graph, group))
                        elif rank == 0:
                            times[tp].append(_burst_us(graphs[tp]))
                    dist.barrier()
            if rank == 0:
                rows_out.append({"block": name, "m": m, "tp1_us": statistics.median(times[1]),
                                 f"tp{world}_us": statistics.median(times[world]),
                                 f"tp{world}_allreduce_us": statistics.median(reduce_us)})
            graphs = reduce_graph = sharded = whole = None  # free this shape's weights and graphs
            torch.cuda.empty_cache()
    if rank == 0:
        torch.save(rows_out, os.path.join(folder, "rows.pt"))
    dist.barrier()
    dist.destroy_process_group()


def markdown(rows: list[dict[str, Any]], tps: list[int]) -> str:
    headers = ["block", "M"] + [f"TP={tp} us" for tp in tps]
    headers += [f"TP={tp} speed-up" for tp in tps if tp > 1]
    headers += [f"TP={tp} all-reduce us (share)" for tp in tps if tp > 1]
    table = []
    for r in rows:
        line = [r["block"], str(r["m"])] + [f"{r[f'tp{tp}_us']:.1f}" for tp in tps]
        line += [f"{r['tp1_us'] / r[f'tp{tp}_us']:.2f}x" for tp in tps if tp > 1]
        line += [f"{r[f'tp{tp}_allreduce_us']:.1f} ({r[f'tp{tp}_allreduce_us'] / r[f'tp{tp}_us']:.0%})"
                 for tp in tps if tp > 1]
        table.append(line)
    return report.markdown_table(headers, table, align_left=1)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="bench_tp", description=__doc__.split("\n\n")[0])
    p.add_argument("--tp", type=int, default=2, help="the TP size timed against TP=1 (default 2; needs that many GPUs)")
    p.add_argument("--rows", default="1,16,2048", help="comma-separated M (default 1,16,2048)")
    p.add_argument("--scheme", default="w8a8", help="a tcgemm preset (default w8a8)")
    p.add_argument("--json", default=None, help="also write the rows and the run's metadata to this JSON file")
    args = p.parse_args(argv)
    args.rows = [int(m) for m in args.rows.split(",")]
    if args.tp < 2:
        p.error("--tp must be at least 2")
    world = args.tp
    if not torch.cuda.is_available() or torch.cuda.device_count() < world:
        print(f"bench_tp: needs {world} GPUs, found {torch.cuda.device_count() if torch.cuda.is_available() else 0}")
        return 0
    command = report.command_line("benchmarks.bench_tp", sys.argv[1:] if argv is None else argv)
    meta = report.run_metadata(torch.device("cuda", 0), command)
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast off (inherited by the workers)
    with tempfile.TemporaryDirectory() as folder:
        mp.spawn(_worker, args=(world, folder, args), nprocs=world)
        rows = torch.load(os.path.join(folder, "rows.pt"))
    print(report.header_line(meta, command))
    print(f"scheme {args.scheme}, CUDA graphs, time per block")
    print(markdown(rows, [1, world]))
    if args.json:
        report.write_json({"meta": meta, "rows": rows, "tp": args.tp, "scheme": args.scheme}, Path(args.json))
    return 0


if __name__ == "__main__":
    sys.exit(main())
