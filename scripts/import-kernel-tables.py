#!/usr/bin/env python3
"""Compacts NVIDIA aiconfigurator's measured vLLM kernel timings into the tables
the `kernels` latency model embeds (src/latency/kernels/<gpu>.json):

    python3 -m pip install pyarrow   # reads the Parquet tables
    python3 scripts/import-kernel-tables.py [path/to/shared]
    python3 scripts/import-kernel-tables.py --aic-systems DIR --aic-commit SHA \
        [--systems b200_sxm,gb200] [--vllm 0.24.0] [--out DIR]

The second form reads a checkout of ai-dynamo/aiconfigurator instead of
../shared (DIR = aic-core/src/aiconfigurator_core/systems/data): see
`import_aic` at the end.

Input: ../shared/data/aiconfigurator-vllm-h100-h200/csv_bf16 and, for what the
CSV subset leaves out (FP8 GEMMs, fused MoE), the verbatim Parquet tables beside
it (vLLM 0.24 kernels measured on H100 SXM and H200 SXM; latencies in ms).
Output per GPU, latencies in microseconds to 4 significant digits, every table a
dense grid:

* gemm: BF16 `torch.nn.functional.linear`, axes m × n × k.
* gemm_fp8: FP8 (per-tensor scales, `CutlassFP8ScaledMMLinearKernel`, what
  vLLM's `quantization: fp8` runs on Hopper), same axes.
* moe: BF16 fused MoE (`vllm_unquantizedfusedmoe_triton_tritonexperts`), the
  mildly skewed routing of the three measured (power law, alpha 1.01), one
  line over num_tokens per (hidden, inter, topk, experts, moe_tp, moe_ep).
* moe_fp8_block: FP8 fused MoE with 128 x 128 block scales (Qwen3 and
  DeepSeek -FP8 checkpoints), vLLM's Triton experts
  (`vllm_fp8moe_triton_tritonexperts`), same routing and layout.
* moe_balanced, moe_fp8_block_balanced: the same kernels with every expert
  equally likely (`balanced`), as a benchmark of random tokens routes; at a
  decode batch of 16 tokens it touches more experts (Qwen3-235B-A22B's
  block-FP8 experts over two H200s: 322.5 against 190.2 us).
* context_attention: FlashAttention prefill (causal, KV bf16), one grid of
  batch × isl per (num_heads, num_kv_heads, head_dim).
* generation_attention: FlashAttention decode, batch × kv_len per head shape.
* allreduce: vLLM custom all-reduce under CUDA graphs (`vllm_graph`), message
  size (elements, bf16) per TP degree.

Not imported: the block-FP8 GEMMs (DeepGEMM, CUTLASS and FlashInfer alike
take 60-170 us per call at any small shape, host overhead an engine under
CUDA graphs does not pay; the model prices block-FP8 linear layers on the
per-tensor FP8 table) and the per-tensor FP8 fused MoE (ModelOpt's
FlashInfer kernel, measured slower than BF16 at every size).

GEMM times are made non-decreasing in m (each point becomes the least time
measured at that m or any larger one): a GEMM can always run the kernel
chosen for more rows, padded, and single measurements swing by up to 20 %
between neighbouring m as cuBLAS switches kernels. `envelope` counts the
points this lowered.

The measurements leave holes: GEMM shapes that were not collected and
attention points that ran out of memory at large batch × length. A hole is
filled from its own row: linearly in the axis value from the two nearest
measured points on that axis (interpolating between them, or extrapolating
past the last ones). The count of filled points per table is printed and
stored (`filled`), so a reader can see how much of a table is measured.

A100 SXM and L40S (src/latency/kernels/{a100,l40s}.json) come from
../shared/data/aiconfigurator-vllm-a100-l40s, vLLM 0.14.0, BF16 only: see
`a100_l40s` at the end.
"""
import argparse
import csv
import json
import os
import re
from collections import defaultdict

args = argparse.ArgumentParser(description="Compacts aiconfigurator's measured vLLM kernel tables.")
args.add_argument("shared", nargs="?", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared"),
                  help="the shared folder holding data/aiconfigurator-vllm-* (default ../shared)")
args.add_argument("--aic-systems", metavar="DIR",
                  help="import from an aiconfigurator checkout's aic-core/src/aiconfigurator_core/systems/data "
                       "instead (only --systems are written)")
args.add_argument("--aic-commit", metavar="SHA", help="the checkout's commit, recorded in each table's `source`")
args.add_argument("--systems", default="b200_sxm,gb200", help="aiconfigurator system names (with --aic-systems)")
args.add_argument("--vllm", default="0.24.0", help="vLLM version folder to read (with --aic-systems)")
args.add_argument("--out", metavar="DIR", help="where to write <gpu>.json (default src/latency/kernels)")
args = args.parse_args()
shared = args.shared
src = os.path.join(shared, "data", "aiconfigurator-vllm-h100-h200", "csv_bf16")
dest = args.out or os.path.join(os.path.dirname(__file__), "..", "src", "latency", "kernels")


def us(ms):
    return float(f"{ms * 1000.0:.4g}")


def fill_line(axis, values):
    """Fills None entries of `values` (over increasing `axis`) from the two
    nearest measured points, interpolating or extrapolating linearly; returns
    the count filled. Fewer than two measured points: nothing is filled."""
    known = [i for i, v in enumerate(values) if v is not None]
    if len(known) < 2:
        return 0
    filled = 0
    for i, v in enumerate(values):
        if v is not None:
            continue
        lower = [j for j in known if j < i]
        upper = [j for j in known if j > i]
        if lower and upper:
            a, b = lower[-1], upper[0]
        elif lower:
            a, b = lower[-2] if len(lower) > 1 else None, lower[-1]
        else:
            a, b = upper[0], upper[1] if len(upper) > 1 else None
        if a is None or b is None:
            continue
        t = (axis[i] - axis[a]) / (axis[b] - axis[a])
        values[i] = max(us(values[a] / 1000.0 + t * (values[b] - values[a]) / 1000.0), values[a] if i > a else 0.0)
        filled += 1
    return filled


def grid2(rows, xs, ys):
    """Dense x × y grid (row-major) from {(x, y): us}; holes filled along y,
    then along x."""
    g = [[rows.get((x, y)) for y in ys] for x in xs]
    filled = sum(fill_line(ys, line) for line in g)
    for j in range(len(ys)):
        col = [g[i][j] for i in range(len(xs))]
        filled += fill_line(xs, col)
        for i in range(len(xs)):
            g[i][j] = col[i]
    if any(v is None for line in g for v in line):
        raise SystemExit(f"grid has holes that cannot be filled: {xs} x {ys}")
    return [v for line in g for v in line], filled


def read(name, folder=None):
    if isinstance(folder, Aic):
        return folder.rows(name)
    with open(os.path.join(folder or src, name), newline="") as f:
        return list(csv.DictReader(f))


class Aic:
    """A checkout of ai-dynamo/aiconfigurator (`data` = its aic-core/src/
    aiconfigurator_core/systems/data, the same <system>/<op>/vllm/<version>/
    layout as ../shared's parquet/ folders). Passed as `folder`, it serves
    the rows the csv_bf16 subsets would hold, made by their recipe
    (../shared/data/aiconfigurator-vllm-a100-l40s/README.md) from the
    verbatim Parquet tables: BF16 GEMMs; attention over a bfloat16 KV cache
    and full attention (window_size 0 where the column exists); all
    all-reduce rows."""

    def __init__(self, data, version):
        self.data, self.version = data, version

    def table(self, prefix, rel):
        import pyarrow.parquet as pq
        return pq.read_table(os.path.join(self.data, prefix, rel)).to_pydict()

    def rows(self, name):
        m = re.fullmatch(r"(.+)_vllm[0-9.]+_(gemm_bf16|context_attention_kvbf16|generation_attention_kvbf16|"
                         r"custom_allreduce)\.csv", name)
        prefix, subset = m.group(1), m.group(2)
        v = self.version
        if subset == "gemm_bf16":
            d = self.table(prefix, f"gemm/vllm/{v}/gemm_perf.parquet")
            keep = [i for i in range(len(d["latency"])) if d["gemm_dtype"][i] == "bfloat16"]
            cols = {"m": "m", "n": "n", "k": "k"}
        elif subset == "custom_allreduce":
            d = self.table(prefix, f"comm/vllm/{v}/custom_allreduce_perf.parquet")
            keep = range(len(d["latency"]))
            cols = {"backend": "backend", "num_gpus": "num_gpus", "message_size_elems": "message_size"}
        else:
            kind = subset.split("_")[0]
            d = self.table(prefix, f"attention/vllm/{v}/{kind}_attention_perf.parquet")
            keep = [i for i in range(len(d["latency"])) if d["kv_cache_dtype"][i] == "bfloat16"
                    and d.get("window_size", [0] * len(d["latency"]))[i] == 0]
            cols = {"batch_size": "batch_size", "isl": "isl", "kv_len_step": "step", "num_heads": "num_heads",
                    "num_kv_heads": "num_key_value_heads", "head_dim": "head_dim"}
        rows = [{**{c: d[p][i] for c, p in cols.items()}, "latency_ms": d["latency"][i]} for i in keep]
        if len({tuple(r[c] for c in cols) for r in rows}) != len(rows):
            raise SystemExit(f"{prefix} {subset}: a shape was measured twice (by two kernels?)")
        return rows


def gemm(prefix, dtype="bfloat16", folder=None, version="0.24"):
    if dtype == "bfloat16":
        rows = read(f"{prefix}_vllm{version}_gemm_bf16.csv", folder)
        t = {(int(r["m"]), int(r["n"]), int(r["k"])): us(float(r["latency_ms"])) for r in rows}
    else:
        d = parquet(prefix, f"gemm/vllm/{version}.0/gemm_perf.parquet", folder)
        t = {(d["m"][i], d["n"][i], d["k"][i]): us(d["latency"][i])
             for i in range(len(d["latency"])) if d["gemm_dtype"][i] == dtype}
    ms, ns, ks = (sorted({key[i] for key in t}) for i in range(3))
    filled = 0
    grid = []
    for m in ms:
        g = [[t.get((m, n, k)) for k in ks] for n in ns]
        filled += sum(fill_line(ks, line) for line in g)
        grid.append(g)
    # Remaining holes: along m.
    for a in range(len(ns)):
        for b in range(len(ks)):
            line = [grid[i][a][b] for i in range(len(ms))]
            filled += fill_line(ms, line)
            for i in range(len(ms)):
                grid[i][a][b] = line[i]
    lowered = 0
    for a in range(len(ns)):
        for b in range(len(ks)):
            for i in range(len(ms) - 2, -1, -1):
                if grid[i + 1][a][b] < grid[i][a][b]:
                    grid[i][a][b] = grid[i + 1][a][b]
                    lowered += 1
    flat = [v for plane in grid for line in plane for v in line]
    if any(v is None for v in flat):
        raise SystemExit("gemm grid has holes that cannot be filled")
    return {"m": ms, "n": ns, "k": ks, "us": flat, "measured": len(t), "filled": filled, "envelope": lowered}


def attention(prefix, kind, length_col, folder=None, version="0.24"):
    rows = read(f"{prefix}_vllm{version}_{kind}_attention_kvbf16.csv", folder)
    by_shape = defaultdict(dict)
    for r in rows:
        shape = (int(r["num_heads"]), int(r["num_kv_heads"]), int(r["head_dim"]))
        by_shape[shape][(int(r["batch_size"]), int(r[length_col]))] = us(float(r["latency_ms"]))
    batches = sorted({b for t in by_shape.values() for b, _ in t})
    lengths = sorted({n for t in by_shape.values() for _, n in t})
    shapes = []
    for (h, hkv, d), t in sorted(by_shape.items(), key=lambda kv: (kv[0][2], kv[0][0], kv[0][1])):
        flat, filled = grid2(t, batches, lengths)
        shapes.append({"num_heads": h, "num_kv_heads": hkv, "head_dim": d, "us": flat,
                       "measured": len(t), "filled": filled})
    return {"batch": batches, "len": lengths, "shapes": shapes}


def parquet(prefix, rel, folder=None):
    if isinstance(folder, Aic):
        return folder.table(prefix, rel)
    import pyarrow.parquet as pq
    return pq.read_table(os.path.join(folder or src, "..", "parquet", prefix, rel)).to_pydict()


def moe(prefix, dtype="bfloat16", kernel="vllm_unquantizedfusedmoe_triton_tritonexperts", routing="power_law_1.01",
        folder=None, version="0.24"):
    """`kernel` is one kernel_source, or a tuple of several that split the
    shapes between them (vLLM 0.24 on Blackwell runs FlashInfer's TRT-LLM
    experts for most shapes and its CUTLASS ones for the rest; each shape
    was measured with one of them): each shape then records its `kernel`."""
    d = parquet(prefix, f"moe/vllm/{version}.0/moe_perf.parquet", folder)
    kernels = (kernel,) if isinstance(kernel, str) else kernel
    lines = defaultdict(dict)
    owner = {}
    for i in range(len(d["latency"])):
        if d["moe_dtype"][i] != dtype or d["distribution"][i] != routing or d["kernel_source"][i] not in kernels:
            continue
        key = tuple(d[c][i] for c in ("hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size"))
        if owner.setdefault(key, d["kernel_source"][i]) != d["kernel_source"][i]:
            raise SystemExit(f"{prefix} moe {dtype}: shape {key} measured with two kernels")
        lines[key][d["num_tokens"][i]] = us(d["latency"][i])
    tokens = sorted({n for t in lines.values() for n in t})
    shapes, filled = [], 0
    for key, t in sorted(lines.items()):
        line = [t.get(n) for n in tokens]
        filled += fill_line(tokens, line)
        if any(v is None for v in line):
            continue
        shape = dict(zip(("hidden", "inter", "topk", "experts", "moe_tp", "moe_ep"), key), us=line)
        if len(kernels) > 1:
            shape["kernel"] = owner[key]
        shapes.append(shape)
    return {"tokens": tokens, "shapes": shapes, "filled": filled}


def allreduce(prefix, folder=None, version="0.24"):
    rows = [r for r in read(f"{prefix}_vllm{version}_custom_allreduce.csv", folder) if r["backend"] == "vllm_graph"]
    by_tp = defaultdict(dict)
    for r in rows:
        by_tp[int(r["num_gpus"])][int(r["message_size_elems"])] = us(float(r["latency_ms"]))
    sizes = sorted({s for t in by_tp.values() for s in t})
    out = []
    for tp, t in sorted(by_tp.items()):
        line = [t.get(s) for s in sizes]
        filled = fill_line(sizes, line)
        out.append({"tp": tp, "us": line, "filled": filled})
    return {"elements": sizes, "by_tp": out}


# --- H100 FP8 GEMMs as vLLM 0.14 ran them --------------------------------------
# aiconfigurator's vLLM 0.14.0 H100 table (../shared/data/aiconfigurator-vllm-a100-l40s/
# parquet/h100_sxm/gemm/vllm/0.14.0, kernel `vllm_default`): its FP8 GEMMs are ~39 % slower
# than the 0.24 table's CUTLASS ones, so a run on a release before 0.20 (the silicon rows of
# vLLM 0.10-0.12) is priced on them (scenario key `fp8_gemm_release: "0.14"`). Stored on its
# own, measured axes (21 m x 21 n x 21 k); the simulator resamples it onto the 0.24 axes
# when it loads the table. Same hole filling and monotone envelope in m as `gemm`.
def h100_vllm014_fp8_gemm():
    import pyarrow.parquet as pq
    path = os.path.join(shared, "data", "aiconfigurator-vllm-a100-l40s", "parquet", "h100_sxm", "gemm", "vllm",
                        "0.14.0", "gemm_perf.parquet")
    d = pq.read_table(path).to_pydict()
    t = {(d["m"][i], d["n"][i], d["k"][i]): us(d["latency"][i])
         for i in range(len(d["latency"])) if d["gemm_dtype"][i] == "fp8"}
    ms, ns, ks = (sorted({key[i] for key in t}) for i in range(3))
    grid = [[[t.get((m, n, k)) for k in ks] for n in ns] for m in ms]
    filled = sum(fill_line(ks, line) for plane in grid for line in plane)
    lowered = 0
    for a in range(len(ns)):
        for b in range(len(ks)):
            line = [grid[i][a][b] for i in range(len(ms))]
            filled += fill_line(ms, line)
            for i in range(len(ms) - 2, -1, -1):
                if line[i + 1] is not None and line[i] is not None and line[i + 1] < line[i]:
                    line[i] = line[i + 1]
                    lowered += 1
            for i in range(len(ms)):
                grid[i][a][b] = line[i]
    flat = [v for plane in grid for line in plane for v in line]
    if any(v is None for v in flat):
        raise SystemExit("vLLM 0.14 fp8 gemm grid has holes that cannot be filled")
    print(f"h100 vLLM 0.14 fp8 gemm: {len(t)} measured + {filled} filled, {lowered} lowered")
    return {"m": ms, "n": ns, "k": ks, "us": flat, "measured": len(t), "filled": filled, "envelope": lowered}


def h100_h200():
    for gpu, prefix, device in [("h100", "h100_sxm", "NVIDIA H100 80GB HBM3"), ("h200", "h200_sxm", "NVIDIA H200")]:
        table = {
            "source": f"aiconfigurator-core 0.12.0 measured vLLM 0.24 kernels, {device} "
            "(../shared/data/aiconfigurator-vllm-h100-h200/csv_bf16), compacted by scripts/import-kernel-tables.py",
            "gemm": gemm(prefix),
            "gemm_fp8": gemm(prefix, "fp8"),
            "moe": moe(prefix),
            "moe_fp8_block": moe(prefix, "fp8_block", "vllm_fp8moe_triton_tritonexperts"),
            "moe_balanced": moe(prefix, routing="balanced"),
            "moe_fp8_block_balanced": moe(prefix, "fp8_block", "vllm_fp8moe_triton_tritonexperts", "balanced"),
            "context_attention": attention(prefix, "context", "isl"),
            "generation_attention": attention(prefix, "generation", "kv_len_step"),
            "allreduce": allreduce(prefix),
        }
        if gpu == "h100":
            table["gemm_fp8_vllm014"] = h100_vllm014_fp8_gemm()
        os.makedirs(dest, exist_ok=True)
        path = os.path.join(dest, f"{gpu}.json")
        with open(path, "w") as f:
            json.dump(table, f, separators=(",", ":"))
            f.write("\n")
        g = table["gemm"]
        ca = sum(s["filled"] for s in table["context_attention"]["shapes"])
        ga = sum(s["filled"] for s in table["generation_attention"]["shapes"])
        g8, m = table["gemm_fp8"], table["moe"]
        mb = table["moe_fp8_block"]
        print(f"{path}: fp8 gemm {g8['measured']} measured + {g8['filled']} filled, {g8['envelope']} lowered; "
              f"moe {len(m['shapes'])} shapes, {m['filled']} filled")
        print(f"{path}: block fp8 moe {len(mb['shapes'])} shapes, {mb['filled']} filled")
        print(f"{path}: gemm {g['measured']} measured + {g['filled']} filled, {g['envelope']} lowered; "
              f"context attention {len(table['context_attention']['shapes'])} shapes, {ca} filled; generation "
              f"attention {len(table['generation_attention']['shapes'])} shapes, {ga} filled; "
              f"{os.path.getsize(path) / 1e6:.2f} MB")


# --- A100 SXM and L40S: vLLM 0.14.0 tables ------------------------------------
#
# Input: ../shared/data/aiconfigurator-vllm-a100-l40s (aiconfigurator @ 095f58a,
# the same producer and formats as above; its README). vLLM 0.14.0 is the one
# version collected on both GPUs and the closest to the 0.15.1 that BLIS's
# A100/L40S runs used. Imported: BF16 GEMMs (`vllm_default`), FlashAttention
# prefill and decode over a BF16 KV cache, vLLM's `tensor_model_parallel_all_
# reduce` under CUDA graphs, and BF16 fused MoE (`vllm_fused_moe`, power law
# 1.01; no balanced routing was collected). Not imported: FP8 (A100 has no FP8
# tensor cores; L40S's 0.14 FP8 table is a single `vllm_default` kernel), so the
# `gemm_fp8`, `moe_fp8_block` and `*_balanced` tables are absent and the model
# refuses FP8 on these GPUs. L40S has no NVLink: its 2-GPU rows are vLLM's
# custom all-reduce over PCIe P2P, and at 4 and 8 GPUs vLLM disables the custom
# all-reduce on PCIe-only GPUs, so those rows time its NCCL fallback (0.84 and
# 2.08 ms at 1 M elements, against 0.026/0.028 on A100): what vLLM runs there.
def a100_l40s(shared_dir):
    folder = os.path.join(shared_dir, "data", "aiconfigurator-vllm-a100-l40s", "csv_bf16")
    for gpu, prefix, device in [("a100", "a100_sxm", "NVIDIA A100-SXM4-80GB"), ("l40s", "l40s", "NVIDIA L40S")]:
        v = dict(folder=folder, version="0.14")
        table = {
            "source": f"aiconfigurator @ 095f58a measured vLLM 0.14.0 kernels, {device} "
            "(../shared/data/aiconfigurator-vllm-a100-l40s/csv_bf16), compacted by scripts/import-kernel-tables.py",
            "gemm": gemm(prefix, **v),
            "moe": moe(prefix, kernel="vllm_fused_moe", **v),
            "context_attention": attention(prefix, "context", "isl", **v),
            "generation_attention": attention(prefix, "generation", "kv_len_step", **v),
            "allreduce": allreduce(prefix, **v),
        }
        path = os.path.join(dest, f"{gpu}.json")
        with open(path, "w") as f:
            json.dump(table, f, separators=(",", ":"))
            f.write("\n")
        g, m = table["gemm"], table["moe"]
        ca = sum(s["filled"] for s in table["context_attention"]["shapes"])
        ga = sum(s["filled"] for s in table["generation_attention"]["shapes"])
        print(f"{path}: gemm {g['measured']} measured + {g['filled']} filled, {g['envelope']} lowered; "
              f"moe {len(m['shapes'])} shapes, {m['filled']} filled; context attention "
              f"{len(table['context_attention']['shapes'])} shapes, {ca} filled; generation attention "
              f"{len(table['generation_attention']['shapes'])} shapes, {ga} filled; all-reduce tp "
              f"{[t['tp'] for t in table['allreduce']['by_tp']]}; {os.path.getsize(path) / 1e6:.2f} MB")


# --- Any system, from a checkout of ai-dynamo/aiconfigurator -----------------
#
# `--aic-systems DIR` reads DIR/<system>/<op>/vllm/<version>/*.parquet (the
# repository's aic-core/src/aiconfigurator_core/systems/data; real Parquet in
# git, not LFS: only *.txt there is LFS-tracked) and writes one <gpu>.json per
# system with the same tables as the H100/H200 import above: the csv_bf16
# subsets are made from the Parquet in memory (`Aic`), by their recipe. Given
# ../shared's own parquet/ folder it reproduces h100.json and h200.json
# (all but `source` and the vLLM 0.14 FP8 GEMMs).
#
# The kernels on Blackwell (B200, GB200, B300, GB300; vLLM 0.24.0), as
# aiconfigurator measured them: BF16 GEMM `torch.nn.functional.linear` and FP8
# `CutlassFP8ScaledMMLinearKernel` (the same names as on Hopper); attention
# FlashInfer's TRT-LLM kernels (`vllm_flashinfer_trtllmprefill`, and
# `..._trtllmdecode` for decode and for prefill at isl 1); fused MoE split by
# shape between FlashInfer's TRT-LLM and CUTLASS experts (BF16) and TRT-LLM's
# monolithic and modular FP8 block-scale experts (each shape measured with
# one; `kernel` in each MoE shape says which). GB200's all-reduce was measured
# on 2 and 4 GPUs only (one compute tray), so TP 8 has no table there.
AIC_MOE_KERNELS = {
    "hopper": {"bfloat16": "vllm_unquantizedfusedmoe_triton_tritonexperts",
               "fp8_block": "vllm_fp8moe_triton_tritonexperts"},
    "blackwell": {"bfloat16": ("vllm_unquantizedfusedmoe_flashinfer_trtllm_trtllmbf16experts",
                               "vllm_unquantizedfusedmoe_flashinfer_cutlass_flashinferexperts"),
                  "fp8_block": ("vllm_fp8moe_flashinfer_trtllm_trtllmfp8expertsmonolithic",
                                "vllm_fp8moe_flashinfer_trtllm_trtllmfp8expertsmodular")},
    # RTX PRO 6000 (SM120): FlashInfer CUTLASS BF16 experts; no block-FP8 MoE measured.
    "sm120": {"bfloat16": "vllm_unquantizedfusedmoe_flashinfer_cutlass_flashinferexperts", "fp8_block": None},
}
# aiconfigurator system -> (our file name, MoE kernel family).
AIC_SYSTEMS = {"h100_sxm": ("h100", "hopper"), "h200_sxm": ("h200", "hopper"), "b200_sxm": ("b200", "blackwell"),
               "gb200": ("gb200", "blackwell"), "b300_sxm": ("b300", "blackwell"), "gb300": ("gb300", "blackwell"),
               "rtx_pro_6000_server": ("rtxpro6000", "sm120")}


def import_aic(data, commit, systems, version):
    if not commit:
        raise SystemExit("--aic-systems needs --aic-commit (the checkout's commit, recorded in `source`)")
    if not version.endswith(".0"):
        raise SystemExit(f"--vllm {version}: a release folder such as 0.24.0 is expected")
    aic = Aic(data, version)
    v = dict(folder=aic, version=version[:-2])
    for prefix in systems:
        gpu, family = AIC_SYSTEMS[prefix]
        bf16, block = AIC_MOE_KERNELS[family]["bfloat16"], AIC_MOE_KERNELS[family]["fp8_block"]
        devices = set(aic.table(prefix, f"gemm/vllm/{version}/gemm_perf.parquet")["device"])
        if len(devices) != 1:
            raise SystemExit(f"{prefix}: several devices in one table: {devices}")
        device = devices.pop()
        table = {
            "source": f"aiconfigurator @ {commit[:7]} measured vLLM {version} kernels, {device} (ai-dynamo/"
            f"aiconfigurator@{commit} aic-core/src/aiconfigurator_core/systems/data/{prefix}/*/vllm/{version}), "
            "compacted by scripts/import-kernel-tables.py --aic-systems",
            "gemm": gemm(prefix, **v),
            "gemm_fp8": gemm(prefix, "fp8", **v),
            "moe": moe(prefix, kernel=bf16, **v),
            "moe_fp8_block": moe(prefix, "fp8_block", block, **v) if block else None,
            "moe_balanced": moe(prefix, kernel=bf16, routing="balanced", **v),
            "moe_fp8_block_balanced": moe(prefix, "fp8_block", block, "balanced", **v) if block else None,
            "context_attention": attention(prefix, "context", "isl", **v),
            "generation_attention": attention(prefix, "generation", "kv_len_step", **v),
            "allreduce": allreduce(prefix, **v),
        }
        table = {k: t for k, t in table.items() if t is not None}
        os.makedirs(dest, exist_ok=True)
        path = os.path.join(dest, f"{gpu}.json")
        with open(path, "w") as f:
            json.dump(table, f, separators=(",", ":"))
            f.write("\n")
        g, g8 = table["gemm"], table["gemm_fp8"]
        ca = sum(s["filled"] for s in table["context_attention"]["shapes"])
        ga = sum(s["filled"] for s in table["generation_attention"]["shapes"])
        names = [n for n in ("moe", "moe_fp8_block", "moe_balanced", "moe_fp8_block_balanced") if n in table]
        moes = "; ".join(f"{n} {len(table[n]['shapes'])} shapes ({sum(s['moe_ep'] == 1 for s in table[n]['shapes'])}"
                         f" with moe_ep 1), {table[n]['filled']} filled" for n in names)
        print(f"{path} ({device}): gemm {g['measured']} measured + {g['filled']} filled, {g['envelope']} lowered; "
              f"fp8 gemm {g8['measured']} measured + {g8['filled']} filled, {g8['envelope']} lowered; {moes}; "
              f"context attention {len(table['context_attention']['shapes'])} shapes, {ca} filled; generation "
              f"attention {len(table['generation_attention']['shapes'])} shapes, {ga} filled; all-reduce tp "
              f"{[t['tp'] for t in table['allreduce']['by_tp']]}; {os.path.getsize(path)} bytes")


if args.aic_systems:
    import_aic(args.aic_systems, args.aic_commit, args.systems.split(","), args.vllm)
else:
    h100_h200()
    a100_l40s(shared)
