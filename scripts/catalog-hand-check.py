#!/usr/bin/env python3
"""The hand computation behind tests/integration/catalog_models.rs: weights per
GPU and KV blocks of one deployment of each model issue 32 added, counted from
its config.json apart from the simulator's Rust code.

Parameters: embeddings (tied or not), attention projections (latent for
DeepSeek, gated queries for Qwen3-Next), Gated DeltaNet layers, dense MLPs,
routed and shared experts, a vision tower and its projector. Bytes: 2 a weight
(FP8: 1, embeddings and LM head 2; gpt-oss's MXFP4 experts 4.25 bits). KV:
vLLM's grouping (layers bucketed by kind; group size the smallest bucket, or
the largest when under 1.25x; a block is one page of each layer of a group;
the block raised to 16 x ceil(state / (16 x page per token)) for a linear
hybrid), and vLLM's profile: memory x 0.9 - weights - peak activation -
0.67 GiB - NCCL buffers, over the block's bytes.

    python3 scripts/catalog-hand-check.py
"""
import json, math, os
GiB = 2**30
MiB = 2**20
D = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "arch", "catalog", "models") + os.sep
# Memory as nvidia-smi reports it (src/arch/hardware.rs).
GPU = {"H100": 81559*MiB, "H200": 143771*MiB, "A100-80G": 81920*MiB, "L40S": 46068*MiB}
def load(n):
    c = json.load(open(D+n+".json"))
    v = c.get("vision_config")
    t = c.get("text_config")
    if t: c = {**c, **t}
    return c, v
def dep(name, gpu, tp, fp8=False):
    c, v = load(name)
    mt = c.get("model_type","")
    if mt == "gemma3_text":
        for k,val in [("num_attention_heads",8),("vocab_size",262208),("num_key_value_heads",4),("head_dim",256),("max_position_embeddings",131072),("sliding_window_pattern",6)]:
            c.setdefault(k,val)
        c.setdefault("tie_word_embeddings", True)
    d = c["hidden_size"]; L = c["num_hidden_layers"]; H = c["num_attention_heads"]; KV = c.get("num_key_value_heads", H)
    hd = c.get("head_dim") or d//H; V = c["vocab_size"]
    tie = c.get("tie_word_embeddings", False)
    # layer kinds
    kinds = []
    lt = c.get("layer_types")
    for i in range(L):
        if lt: k = {"full_attention":"F","sliding_attention":"S","linear_attention":"N","chunked_attention":"C"}[lt[i]]
        elif c.get("full_attention_interval"): k = "F" if (i+1) % c["full_attention_interval"] == 0 else "N"
        elif c.get("attention_chunk_size"): k = "F" if (i+1)%4==0 else "C"
        elif c.get("sliding_window") and c.get("use_sliding_window", True):
            p = c.get("sliding_window_pattern") or (6 if mt.startswith("gemma3") else None)
            k = "F" if p and (i+1) % p == 0 else "S"
        else: k = "F"
        kinds.append(k)
    natt = sum(1 for k in kinds if k != "N")
    # attention params
    if c.get("kv_lora_rank"):
        qr, kr, nope, rope, vd = c["q_lora_rank"], c["kv_lora_rank"], c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
        att = d*qr + qr + qr*H*(nope+rope) + d*(kr+rope) + kr + kr*H*(nope+vd) + H*vd*d
        kv_el = kr + rope
    else:
        q = H*hd; k = KV*hd
        att = d*(q+2*k) + q*d + (d*q if mt == "qwen3_next" else 0)
        kv_el = 2*math.ceil(KV/tp)*hd
    lin = 0
    if "N" in kinds:
        kh, vh, kd, vdim, ck = c["linear_num_key_heads"], c["linear_num_value_heads"], c["linear_key_head_dim"], c["linear_value_head_dim"], c["linear_conv_kernel_dim"]
        key, val = kh*kd, vh*vdim
        lin = d*(2*key+2*val) + d*2*vh + (2*key+val)*ck + 2*vh + vdim + val*d
    # mlp
    E = c.get("num_local_experts") or c.get("num_experts") or c.get("n_routed_experts")
    inter = c.get("intermediate_size_mlp") or c["intermediate_size"]
    dense_mlp = 3*d*inter
    experts = 0; moe_rest = 0; n_moe = 0
    if E and E >= 2:
        ei = c.get("moe_intermediate_size") or c["intermediate_size"]
        sh = c.get("shared_expert_intermediate_size") or (c.get("n_shared_experts",0)*(c.get("moe_intermediate_size") or 0)) or (c["intermediate_size"] if c.get("intermediate_size_mlp") else 0)
        first = c.get("first_k_dense_replace", 0)
        step = c.get("interleave_moe_layer_step", 1) or 1
        n_moe = (L - first) if step == 1 else L // step
        experts = n_moe * E * 3*d*ei
        moe_rest = n_moe * (d*E + 3*d*sh)
    n_dense = L - n_moe
    vis = 0
    if v:
        g = lambda k: v.get(k, v.get("vt_" + k, 0))  # Kimi's MoonViT: vt_*
        h, i_, nl = g("hidden_size"), g("intermediate_size"), g("num_hidden_layers")
        p = v.get("patch_size",1); ch = v.get("num_channels",3); img = v.get("image_size",0)
        proj = max(v.get("projector_output_dim",0), v.get("vision_output_dim",0), h)
        vis = nl*(4*h*h + 2*h*i_ + 9*h) + p*p*ch*h + (img//p)**2*h + proj*d
    embed = V*d*(1 if tie else 2)
    total = embed + natt*att + (L-natt)*lin + L*2*d + n_dense*dense_mlp + experts + moe_rest + d + vis
    q = c.get("quantization_config") or {}
    mx = q.get("quant_method") == "mxfp4"
    wb = 1 if fp8 else 2
    eb = 4.25/8 if mx else wb
    if q.get("quant_method") == "compressed-tensors":  # Kimi-K2.5: INT4 experts, a bf16 scale per group
        grp = list(q["config_groups"].values())[0]["weights"]["group_size"]
        eb = (4 + 16/grp)/8
    rest = total - embed - experts
    w = (embed*2 + rest*wb)/tp + experts*eb/tp
    # KV layout
    pt = kv_el*2  # bytes per token per layer (bf16 kv)
    state = 0
    if "N" in kinds:
        key, val = kh*kd, vh*vdim
        state = ((ck-1)*(2*key+val)//tp + vh//tp*kd*vdim)*2
    bs = 16
    if state and bs*pt < state: bs = 16*math.ceil(state/(16*pt))
    page = max(bs*pt, state)
    counts = {}
    for k in kinds: counts[k] = counts.get(k,0)+1
    mn, mxl = min(counts.values()), max(counts.values())
    gl = mxl if mxl < mn*1.25 else mn
    groups = sum(math.ceil(n/gl) for n in counts.values())
    block = page*gl
    # vLLM profile: usable - weights - activations - non-torch - nccl
    big = GPU[gpu] >= 70*GiB and not gpu.startswith("A100")
    mbt, mns = (8192, 1024) if big else (2048, 256)
    per_i = (c.get("num_experts_per_tok")*(c.get("moe_intermediate_size") or c["intermediate_size"])//tp) if E and E>=2 else inter//tp
    act = mbt*(4*d + 2*per_i)*2 + mns*V*4
    nccl = {1:0, 2:358612992}.get(tp, 411041792)
    avail = GPU[gpu]*0.9 - w - act - 0.67*GiB - nccl
    blocks = int(avail // block)
    return dict(name=name, params=total, weights_gib=w/GiB, blocks=blocks, block_size=bs, groups=groups, group_layers=gl, counts=counts)
for a in [("gpt-oss-20b","H100",1),("gpt-oss-120b","H100",1),("gemma-3-4b-it","L40S",1),("gemma-3-12b-it","H100",1),("gemma-3-27b-it","H200",1),
          ("Mistral-7B-v0.1","A100-80G",1),("Llama-4-Scout-17B-16E-Instruct","H100",4),("Llama-4-Maverick-17B-128E-Instruct","H200",8,True),
          ("Qwen3-Next-80B-A3B-Instruct","H100",4),("DeepSeek-V3","H200",8,True),("MiniMax-M2.5","H200",4,True),("Kimi-K2.5","H200",8)]:
    r = dep(*a); print(a, f"{r['params']/1e9:.2f}B", f"{r['weights_gib']:.2f} GiB", r['blocks'], r['block_size'], r['groups'], r['group_layers'], r['counts'])
