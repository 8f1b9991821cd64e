#!/usr/bin/env python
"""Drives vLLM's real V1 scheduler over the conformance cases and writes golden traces.

Run with the python of a venv that has vllm installed (CPU only, no weights):

    VLLM_TARGET_DEVICE=cpu HF_HUB_OFFLINE=1 <venv>/bin/python \
        scripts/vllm-conformance/driver.py --mode sync|async --model DIR

DIR holds only a config.json (Llama-2-7b-hf's). Every case in
tests/data/vllm-conformance/cases/ (or --cases DIR: features/cases,
hybrid/cases) is run in this one process, against
vllm.v1.core.sched.scheduler.Scheduler (sync) or
vllm.v1.core.sched.async_scheduler.AsyncScheduler (async), with a fake model
runner that samples token 7 whenever a step's computation reaches the end of
the sequence known at schedule time. The trace goes to
tests/data/vllm-conformance/golden/<vllm version>-<mode>.jsonl.
A case with `kv_groups` runs with one KV cache group per entry (full attention,
sliding window, chunked local) sharing one block pool; its blocks held per
group go to <version>-<mode>.groups.jsonl beside the trace.
See scripts/vllm-conformance/README.md for the loop and the format.
"""
import argparse
import dataclasses
import inspect
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from cases import (SAMPLED_TOKEN, accepted_drafts, lora_ids,  # noqa: E402
                   prompt_token_ids, spec_key)

DATA = ROOT / "tests" / "data" / "vllm-conformance"
VERSIONS = ("0.15.1", "0.19.0", "0.33.0")
MAX_STEPS = 200_000


class VllmApi:
    """The few version-dependent entry points, resolved once per process."""

    def __init__(self):
        import torch
        import vllm
        from vllm.config import (CacheConfig, DeviceConfig, ModelConfig,
                                 SchedulerConfig, VllmConfig)
        from vllm.sampling_params import SamplingParams
        from vllm.utils.hashing import sha256
        from vllm.v1.core.kv_cache_utils import (get_request_block_hasher,
                                                 init_none_hash)
        from vllm.v1.core.sched.async_scheduler import AsyncScheduler
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.kv_cache_interface import (ChunkedLocalAttentionSpec,
                                                FullAttentionSpec, KVCacheConfig,
                                                KVCacheGroupSpec, SlidingWindowSpec)
        from vllm.v1.outputs import DraftTokenIds, ModelRunnerOutput
        from vllm.v1.request import Request, RequestStatus
        from vllm.v1.structured_output import StructuredOutputManager

        self.version = vllm.__version__
        self.torch = torch
        self.CacheConfig, self.DeviceConfig = CacheConfig, DeviceConfig
        self.ModelConfig, self.SchedulerConfig, self.VllmConfig = (
            ModelConfig, SchedulerConfig, VllmConfig)
        self.SamplingParams = SamplingParams
        self.sha256 = sha256
        self.get_request_block_hasher = get_request_block_hasher
        self.Scheduler, self.AsyncScheduler = Scheduler, AsyncScheduler
        self.FullAttentionSpec = FullAttentionSpec
        self.SlidingWindowSpec = SlidingWindowSpec
        self.ChunkedLocalAttentionSpec = ChunkedLocalAttentionSpec
        self.KVCacheConfig, self.KVCacheGroupSpec = KVCacheConfig, KVCacheGroupSpec
        self.ModelRunnerOutput = ModelRunnerOutput
        self.DraftTokenIds = DraftTokenIds
        self.Request, self.RequestStatus = Request, RequestStatus
        self.StructuredOutputManager = StructuredOutputManager
        init_none_hash(sha256)
        # vLLM <= 0.15 takes the EOS id in Request(); later versions read it from
        # the sampling params. ignore_eos makes it irrelevant either way.
        self.request_takes_eos = "eos_token_id" in inspect.signature(Request).parameters
        # ModelRunnerOutput fields differ across versions: fill every field that has
        # no default (req_ids, req_id_to_index in all three) and pass the rest only
        # if the installed dataclass has it.
        self.mro_fields = {f.name: f for f in dataclasses.fields(ModelRunnerOutput)}
        self.model_configs = {}

    def model_config(self, model_dir, max_model_len):
        key = (model_dir, max_model_len)
        if key not in self.model_configs:
            self.model_configs[key] = self.ModelConfig(
                model=model_dir, tokenizer=model_dir, skip_tokenizer_init=True,
                max_model_len=max_model_len, seed=0)
        return self.model_configs[key]

    def scheduler(self, case, mode, model_dir):
        eng = case["engine"]
        spec, lora = case.get("speculative"), case.get("lora")
        model_config = self.model_config(model_dir, eng["max_model_len"])
        sched_config = self.SchedulerConfig(
            max_num_seqs=eng["max_num_seqs"],
            max_num_batched_tokens=eng["max_num_batched_tokens"],
            long_prefill_token_threshold=eng["long_prefill_token_threshold"],
            enable_chunked_prefill=True,
            max_model_len=eng["max_model_len"],
            is_encoder_decoder=False,
            async_scheduling=(mode == "async"),
            # "fcfs" (every release's default) unless the case asks for "priority"
            policy=eng.get("scheduling_policy", "fcfs"),
        )
        cache_kw = {}
        if "prefix_cache_retention_interval" in eng:
            # Hybrid cases only (README, "Hybrid KV cache groups"): null is dense
            # retention. Absent: the release's CacheConfig default.
            assert "prefix_cache_retention_interval" in {
                f.name for f in dataclasses.fields(self.CacheConfig)}, \
                "this vLLM has no prefix_cache_retention_interval"
            cache_kw["prefix_cache_retention_interval"] = eng["prefix_cache_retention_interval"]
        cache_config = self.CacheConfig(
            block_size=eng["block_size"],
            enable_prefix_caching=eng["enable_prefix_caching"],
            **cache_kw,
        )
        extra = {}
        if spec is not None:
            extra["speculative_config"] = self.speculative_config(spec, model_config, model_dir)
        if lora is not None:
            # The real LoRAConfig: it needs no model files. The scheduler reads only
            # max_loras; adapters are never loaded (there is no worker).
            from vllm.config import LoRAConfig
            extra["lora_config"] = LoRAConfig(max_loras=lora["max_loras"],
                                              max_lora_rank=lora["max_lora_rank"])
        vllm_config = self.VllmConfig(
            model_config=model_config,
            scheduler_config=sched_config,
            cache_config=cache_config,
            device_config=self.DeviceConfig(device="cpu"),
            **extra,
        )
        n = eng["num_gpu_blocks"]
        vllm_config.cache_config.num_gpu_blocks = n
        groups = case.get("kv_groups")
        if groups is not None and mode == "async":
            # The CPU platform turns async scheduling off in VllmConfig
            # (platforms/cpu.py); a GPU server keeps it on, which makes
            # vllm_config.max_in_flight_tokens 2 x max_num_batched_tokens: the
            # window group's admission cap is sized from it. (The base cases
            # never read it.)
            vllm_config.scheduler_config.async_scheduling = True
        if groups is None:
            attn = self.FullAttentionSpec(block_size=eng["block_size"], num_kv_heads=1,
                                          head_size=1, dtype=self.torch.float32)
            kv_cache_config = self.KVCacheConfig(
                num_blocks=n, kv_cache_tensors=[],
                kv_cache_groups=[self.KVCacheGroupSpec(["layer.0"], attn)])
        else:
            kv_cache_config = self.hybrid_kv_cache_config(groups, eng, vllm_config)
        cls = self.AsyncScheduler if mode == "async" else self.Scheduler
        s = cls(vllm_config=vllm_config, kv_cache_config=kv_cache_config,
                structured_output_manager=self.StructuredOutputManager(vllm_config),
                block_size=eng["block_size"], log_stats=False)
        # The configs can rewrite settings; make sure the scheduler runs the case's.
        sc = s.scheduler_config
        assert s.max_num_running_reqs == eng["max_num_seqs"]
        assert s.max_num_scheduled_tokens == eng["max_num_batched_tokens"]
        assert sc.long_prefill_token_threshold == eng["long_prefill_token_threshold"]
        assert s.max_model_len == eng["max_model_len"]
        assert s.kv_cache_manager.enable_caching == eng["enable_prefix_caching"]
        assert s.kv_cache_manager.block_pool.num_gpu_blocks == n
        assert s.policy.value == eng.get("scheduling_policy", "fcfs")
        assert s.connector is None and not s.use_pp
        if spec is None:
            assert s.num_spec_tokens == 0 and s.num_lookahead_tokens == 0
        else:
            k = spec["k"]
            eagle = spec["method"] == "eagle"
            assert s.num_spec_tokens == k, (s.num_spec_tokens, k)
            assert s.num_lookahead_tokens == (k if eagle else 0)
            assert s.use_eagle == eagle
            # <= 0.15: the KV cache manager drops the last block of an EAGLE
            # prefix hit. Later releases drop it only when block hashes do not
            # already cover the drafter's lookahead (use_eagle_block_drop).
            assert s.kv_cache_manager.use_eagle == getattr(s, "use_eagle_block_drop", eagle)
        if lora is None:
            assert s.lora_config is None
        else:
            assert s.lora_config.max_loras == lora["max_loras"]
        # Newer knobs, off by default (absent in older versions).
        assert getattr(s, "max_num_active_reqs", eng["max_num_seqs"]) == eng["max_num_seqs"]
        assert getattr(s, "local_prefill_interval", 1) == 1
        assert not getattr(s, "adaptive_long_prefill_threshold", False)
        assert getattr(s.kv_cache_manager, "watermark_blocks", 0) == 0
        if groups is not None:
            self.check_hybrid(s, case)
        return s

    # -- hybrid KV cache groups (README, "Hybrid KV cache groups") ---------------
    def group_spec(self, g, block_size):
        kw = dict(block_size=block_size, num_kv_heads=1, head_size=1,
                  dtype=self.torch.float32)
        if g["kind"] == "full":
            return self.FullAttentionSpec(**kw)
        if g["kind"] == "sliding_window":
            return self.SlidingWindowSpec(sliding_window=g["window"], **kw)
        if g["kind"] == "chunked_local":
            return self.ChunkedLocalAttentionSpec(attention_chunk_size=g["chunk"], **kw)
        raise ValueError(f"unknown kv group kind {g['kind']!r}")

    def hybrid_kv_cache_config(self, groups, eng, vllm_config):
        """One KVCacheGroupSpec per entry of the case's `kv_groups`, one layer
        each (so every group has the same page size, as vLLM's
        `_get_kv_cache_groups_uniform_page_size` makes them), all drawing from
        one pool of `num_gpu_blocks` blocks (the null block included), as
        `get_kv_cache_config_from_groups` builds it: num_blocks is the pool's
        size whatever the number of groups. The retention policy is the
        CacheConfig's, as that function copies it."""
        bs = eng["block_size"]
        kw = {}
        fields = {f.name for f in dataclasses.fields(self.KVCacheConfig)}
        if "prefix_cache_retention_interval" in fields:
            kw["prefix_cache_retention_interval"] = (
                vllm_config.cache_config.prefix_cache_retention_interval)
        # What EngineCore resolves for equal block sizes (informational for the
        # scheduler; resolve_kv_cache_block_sizes gives lcm = gcd = block_size).
        for name in ("hash_block_size", "cache_hit_alignment_tokens"):
            if name in fields:
                kw[name] = bs
        return self.KVCacheConfig(
            num_blocks=eng["num_gpu_blocks"], kv_cache_tensors=[],
            kv_cache_groups=[self.KVCacheGroupSpec([f"layer.{i}"], self.group_spec(g, bs))
                             for i, g in enumerate(groups)],
            **kw)

    MANAGERS = {"full": "FullAttentionManager", "sliding_window": "SlidingWindowManager",
                "chunked_local": "ChunkedLocalAttentionManager"}

    def check_hybrid(self, s, case):
        """The scheduler runs the case's groups with the hybrid coordinator."""
        eng, groups = case["engine"], case["kv_groups"]
        coord = s.kv_cache_manager.coordinator
        want = ("HybridKVCacheCoordinator" if eng["enable_prefix_caching"]
                else "KVCacheCoordinatorNoPrefixCache")
        assert type(coord).__name__ == want, (type(coord).__name__, want)
        managers = coord.single_type_managers
        assert [type(m).__name__ for m in managers] == \
            [self.MANAGERS[g["kind"]] for g in groups]
        assert all(m.block_pool is s.kv_cache_manager.block_pool for m in managers)
        for m, g in zip(managers, groups):
            assert m.block_size == eng["block_size"]
            if g["kind"] == "sliding_window":
                assert m.sliding_window == g["window"]
                assert getattr(m, "extra_retained_tokens", 0) == 0
            if g["kind"] == "chunked_local":
                assert m.attention_chunk_size == g["chunk"]
        assert s.block_size == eng["block_size"]
        if hasattr(s.vllm_config, "max_in_flight_tokens"):
            # one batch in flight in sync mode, two in async (V1 runner, no PP)
            batches = 2 if s.scheduler_config.async_scheduling else 1
            assert batches == (2 if type(s).__name__ == "AsyncScheduler" else 1)
            assert s.vllm_config.max_in_flight_tokens == \
                batches * eng["max_num_batched_tokens"]
        if hasattr(coord, "enable_partial_hash_hits"):
            assert not coord.enable_partial_hash_hits
        assert getattr(s, "prefix_replay_tokens", 0) == 0
        assert not getattr(s, "need_mamba_block_aligned_split", False)

    def describe_hybrid(self, s, case):
        """The group settings that shape a hybrid trace."""
        coord = s.kv_cache_manager.coordinator
        out = []
        for m, g in zip(coord.single_type_managers, case["kv_groups"]):
            name = {"full": "full", "sliding_window": f"sw{g.get('window')}",
                    "chunked_local": f"cl{g.get('chunk')}"}[g["kind"]]
            cap = getattr(m, "max_admission_blocks_per_request", None)
            out.append(name if cap is None else f"{name}(cap {cap})")
        ret = getattr(coord, "retention_interval", "absent")
        return f"[{'+'.join(out)}, retention={ret}]"

    def speculative_config(self, spec, model_config, model_dir):
        """vLLM's own SpeculativeConfig, built offline. n-gram needs no model.
        EAGLE needs a draft model: its config is read from a directory holding
        only a config.json (the target's, with one layer, as an EAGLE head has;
        written next to the target's), and no weights are ever loaded."""
        from vllm.config import ParallelConfig, SpeculativeConfig
        kw = dict(method=spec["method"], num_speculative_tokens=spec["k"],
                  target_model_config=model_config, target_parallel_config=ParallelConfig())
        if spec["method"] == "eagle":
            draft = Path(model_dir).resolve().parent / "eagle-draft"
            draft.mkdir(exist_ok=True)
            cfg = json.loads((Path(model_dir) / "config.json").read_text())
            cfg["num_hidden_layers"] = 1
            text = json.dumps(cfg, indent=2, sort_keys=True) + "\n"
            path = draft / "config.json"
            if not path.exists() or path.read_text() != text:
                # atomically: record.sh runs sync and async at the same time
                tmp = path.with_name(f"config.json.{os.getpid()}.tmp")
                tmp.write_text(text)
                tmp.replace(path)
            kw["model"] = str(draft)
        else:
            # The proposer's settings; the fake runner proposes the drafts itself.
            kw.update(prompt_lookup_max=3, prompt_lookup_min=1)
        return SpeculativeConfig(**kw)

    def describe_spec(self, s):
        """The speculative settings the scheduler derived (those it has)."""
        names = ("num_spec_tokens", "num_lookahead_tokens", "use_eagle", "use_eagle_block_drop",
                 "num_prefill_lookahead", "num_hash_lookahead_tokens", "can_skip_drafts")
        out = [f"{n}={getattr(s, n)}" for n in names if hasattr(s, n)]
        sc = s.vllm_config.speculative_config
        if hasattr(sc, "max_num_new_slots_for_drafting"):
            out.append(f"draft_slots={sc.max_num_new_slots_for_drafting}")
        out.append(f"async_scheduling={s.scheduler_config.async_scheduling}")
        return " ".join(out)

    def describe(self, s):
        """The version-dependent settings that shape these traces."""
        return (f"{type(s).__name__}, scheduler_reserve_full_isl="
                f"{getattr(s, 'scheduler_reserve_full_isl', 'absent')}, "
                f"use_v2_model_runner={getattr(s, 'use_v2_model_runner', 'absent')}")

    def request(self, rid, prompt, output_len, block_size, arrival, lora=None,
                hash_lookahead=0, priority=0):
        # hash_lookahead: tokens after each block that its hash covers, which
        # EngineCore passes from vllm_config.num_hash_lookahead_tokens where the
        # release has it (> 0.15 with EAGLE); 0 is every release's default.
        hasher_args = (block_size, self.sha256) + ((hash_lookahead,) if hash_lookahead else ())
        kw = dict(
            request_id=rid, prompt_token_ids=prompt,
            sampling_params=self.SamplingParams(ignore_eos=True, max_tokens=output_len),
            pooling_params=None, arrival_time=float(arrival),
            # As EngineCore passes it from the API request (0: every release's
            # default; only the priority policy reads it).
            priority=priority,
            block_hasher=self.get_request_block_hasher(*hasher_args))
        if self.request_takes_eos:
            kw["eos_token_id"] = 2
        if lora is not None:
            # (name, int id): the path is never read, the scheduler loads nothing.
            from vllm.lora.request import LoRARequest
            kw["lora_request"] = LoRARequest(lora[0], lora[1], "/nonexistent/" + lora[0])
        return self.Request(**kw)

    def runner_output(self, req_ids, num_sampled):
        """num_sampled[r]: how many tokens request r samples (0: a partial prefill;
        1 + accepted drafts with speculative decoding)."""
        kw = {
            "req_ids": req_ids,
            "req_id_to_index": {r: i for i, r in enumerate(req_ids)},
            # fresh lists: update_from_output trims them in place
            "sampled_token_ids": [[SAMPLED_TOKEN] * num_sampled[r] for r in req_ids],
        }
        for name, f in self.mro_fields.items():
            if name in kw:
                continue
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                kw[name] = None
        return self.ModelRunnerOutput(**kw)


class CaseRun:
    def __init__(self, api, case, mode, model_dir):
        self.api = api
        self.case = case
        self.mode = mode
        eng = case["engine"]
        self.eng = eng
        self.s = api.scheduler(case, mode, model_dir)
        self.hash_lookahead = getattr(self.s.vllm_config, "num_hash_lookahead_tokens", 0)
        self.spec = case.get("speculative")
        self.lora_ids = lora_ids(case)  # adapter name -> lora_int_id
        # Feature cases get a sixth column per row (see README, "Features").
        self.feature = (self.spec is not None or "lora" in case
                        or "scheduling_policy" in case["engine"])
        # Hybrid cases: each row's blocks held per KV cache group, kept beside the
        # trace (README, "Hybrid KV cache groups"); their sum is kv_blocks_used.
        self.hybrid = "kv_groups" in case
        self.group_blocks = []
        self.num_drafts = 0
        self.num_accepted = 0
        reqs = case["requests"]
        self.n = len(reqs)
        T = case["timeout_steps"]
        self.abort_time = [None if T is None else q["arrival_step"] + T - 0.5 for q in reqs]
        self.rejected = [r for r, q in enumerate(reqs)
                         if q["prompt_len"] + q["output_len"] > eng["max_model_len"]]
        rej = set(self.rejected)
        self.pending = [r for r in range(self.n) if r not in rej]  # arrival order
        self.next_pending = 0
        self.tokens = [[] for _ in range(self.n)]
        self.steps = []
        self.aborted = set()
        self.num_aborts_by_state = {"waiting": 0, "prefill": 0, "decode": 0}
        self.num_dropped_tokens = 0
        self.dropped_from = set()  # requests that lost tokens to their timeout
        self.preempted = []
        orig = self.s._preempt_request

        def preempt_and_record(request, *args, **kwargs):
            self.preempted.append(int(request.request_id))
            return orig(request, *args, **kwargs)

        self.s._preempt_request = preempt_and_record

    # -- events ----------------------------------------------------------------
    def arrivals_left(self):
        return self.next_pending < len(self.pending)

    def next_arrival(self):
        return self.case["requests"][self.pending[self.next_pending]]["arrival_step"]

    def add_arrivals(self, t):
        reqs = self.case["requests"]
        while self.arrivals_left() and self.next_arrival() <= t:
            r = self.pending[self.next_pending]
            self.next_pending += 1
            q = reqs[r]
            name = q.get("lora")
            lora = None if name is None else (name, self.lora_ids[name])
            self.s.add_request(self.api.request(
                str(r), prompt_token_ids(self.case, r), q["output_len"],
                self.eng["block_size"], q["arrival_step"], lora, self.hash_lookahead,
                q.get("priority", 0)))

    def unfinished(self):
        return [rid for rid, rq in self.s.requests.items() if not rq.is_finished()]

    def abort_due(self, t):
        due = []
        for rid in self.unfinished():
            r = int(rid)
            at = self.abort_time[r]
            if at is not None and at <= t and r not in self.aborted:
                due.append(rid)
        if not due:
            return
        status = self.api.RequestStatus
        for rid in due:
            rq = self.s.requests[rid]
            if rq.status == status.RUNNING:
                state = "decode" if rq.num_output_tokens > 0 else "prefill"
            else:
                state = "waiting"
            self.num_aborts_by_state[state] += 1
            self.aborted.add(int(rid))
        # One call per request, in (abort time, request index) order, as a
        # server aborts each request when its own client disconnects.
        # (finish_requests turns a list of ids into a set, whose iteration
        # order is hash-randomised: the free-queue order would be too.)
        due.sort(key=lambda rid: (self.abort_time[int(rid)], int(rid)))
        for rid in due:
            self.s.finish_requests(rid, status.FINISHED_ABORTED)

    # -- one schedule() call -----------------------------------------------------
    def schedule(self, t):
        """schedule(); returns (out, num_sampled) and records the row for step t, or
        (out, None) if nothing was scheduled. num_sampled[rid] is how many tokens
        the fake runner will return for rid: 0 for a partial prefill, else 1 plus
        the drafts the acceptance function accepts."""
        s = self.s
        running_before = {rq.request_id for rq in s.running}
        # End of each sequence as known now: prompt + generated + pending placeholders
        # (which, in async mode, count the in-flight step's drafts too).
        seq_end = {rid: (rq.num_tokens + rq.num_output_placeholders, rq.num_output_placeholders)
                   for rid, rq in s.requests.items()}
        # num_computed_tokens before this step, as the scheduler has it now: the
        # acceptance function's position is this + 1 - prompt_len.
        computed_before = {rid: rq.num_computed_tokens for rid, rq in s.requests.items()}
        self.preempted = []
        out = s.schedule()
        preempted = self.preempted
        kv_used = (self.eng["num_gpu_blocks"] - 1) - \
            s.kv_cache_manager.block_pool.get_num_free_blocks()
        if self.hybrid:
            per_group = self.blocks_per_group()
            assert sum(per_group) == kv_used, (self.case["name"], t, per_group, kv_used)
        self.preempt_only = False
        if out.total_num_scheduled_tokens == 0:
            if preempted:
                # In async mode: the one running request that needs a block is
                # preempted (by itself) while the others are skipped because their
                # in-flight step ends them. Under the priority policy, in either
                # mode (<= 0.19): the first running request needs a block, is the
                # lowest-priority one, preempts itself, and the running loop stops
                # (and no waiting request is admitted after a preemption). This
                # call takes no time and no step runs; its row has no scheduled
                # requests and the next row has the same t.
                assert self.mode == "async" or self.s.policy.value == "priority", \
                    f"{self.case['name']}: {t}"
                self.preempt_only = True
                self.steps.append([t, [], [], preempted, kv_used] + ([[]] if self.feature else []))
                if self.hybrid:
                    self.group_blocks.append(per_group)
            return out, None
        scheduled, admitted, sampled, samples = [], [], {}, []
        spec_tokens = out.scheduled_spec_decode_tokens
        for rid, n in out.num_scheduled_tokens.items():
            rq = s.requests[rid]
            scheduled.append([int(rid), n])
            if rid not in running_before:
                admitted.append([int(rid), rq.num_computed_tokens - n])
            end, ph_before = seq_end[rid]
            drafts = len(spec_tokens.get(rid, ()))
            # Drafts are verified after the last known token: the step reaches the
            # end of the sequence plus its drafts.
            assert rq.num_computed_tokens <= end + drafts
            reaches_end = rq.num_computed_tokens - drafts == end
            assert reaches_end or drafts == 0, (self.case["name"], t, rid)
            if self.mode == "async":
                # vLLM's own view: placeholders (the token and its drafts) are
                # added iff the step samples.
                grew = rq.num_output_placeholders - ph_before
                assert grew == (1 + drafts if reaches_end else 0), (rid, grew, drafts)
            num, pos = 0, 0
            if reaches_end:
                num = 1
                if drafts:
                    pos = computed_before[rid] + 1 - rq.num_prompt_tokens
                    assert pos >= 1, (self.case["name"], t, rid, pos)
                    acc = accepted_drafts(self.spec, spec_key(int(rid)), pos, drafts)
                    self.num_drafts += drafts
                    self.num_accepted += acc
                    num += acc
            sampled[rid] = num
            samples.append([int(rid), drafts, num, pos])
        row = [t, scheduled, admitted, preempted, kv_used]
        if self.feature:
            row.append(samples)
        self.steps.append(row)
        if self.hybrid:
            self.group_blocks.append(per_group)
        return out, sampled

    def blocks_per_group(self):
        """Blocks held (not free, not the null block) by each KV cache group:
        the distinct blocks in its requests' block tables. Groups never share a
        block, so these add up to kv_blocks_used."""
        out = []
        for m in self.s.kv_cache_manager.coordinator.single_type_managers:
            ids = {b.block_id for blocks in m.req_to_blocks.values() for b in blocks
                   if not b.is_null}
            out.append(len(ids))
        return out

    def update(self, out, sampled, t):
        """update_from_output for the step that ran at t; its tokens arrive at t + 1."""
        req_ids = list(out.num_scheduled_tokens)
        mro = self.api.runner_output(req_ids, sampled)
        eco = self.s.update_from_output(out, mro)
        if self.spec is not None and self.mode == "sync":
            # As EngineCore.post_step: the drafter proposed K tokens after this
            # step for every request that sampled in it (a partial prefill gets
            # none); vLLM skips the requests that have finished. In async mode
            # the scheduler itself puts K placeholder drafts on each request
            # that samples (AsyncScheduler._update_after_schedule).
            k = self.spec["k"]
            ids = [r for r in req_ids if sampled[r] > 0]
            self.s.update_draft_token_ids(
                self.api.DraftTokenIds(ids, [[SAMPLED_TOKEN] * k for _ in ids]))
        for outputs in eco.values():
            for o in outputs.outputs:
                r = int(o.request_id)
                at = self.abort_time[r]
                for tk in o.new_token_ids:
                    assert tk == SAMPLED_TOKEN
                    if at is not None and t + 1 > at:
                        # The client had gone (this also drops the last token of a
                        # request that vLLM finished in the very update that
                        # delivered it, at arrival + timeout).
                        self.num_dropped_tokens += 1
                        self.dropped_from.add(r)
                        continue
                    self.tokens[r].append(t)

    def idle(self, t):
        """Nothing was scheduled at t: returns the next time, or None when done."""
        left = self.unfinished()
        if not left and not self.arrivals_left():
            return None
        assert not self.s.running, f"{self.case['name']}: empty step at {t} with running"
        assert not left, f"{self.case['name']}: stuck at {t} with {left} waiting"
        return self.next_arrival()

    # -- the two loops -------------------------------------------------------------
    def run_sync(self):
        t = 0
        while True:
            assert len(self.steps) < MAX_STEPS
            self.add_arrivals(t)
            self.abort_due(t)
            out, sampled = self.schedule(t)
            if sampled is None:
                if self.preempt_only:
                    # EngineCore runs the empty step at once: schedule again at t.
                    continue
                t = self.idle(t)
                if t is None:
                    return
                continue
            self.update(out, sampled, t)
            t += 1

    def run_async(self):
        t = 0
        in_flight = None
        while True:
            assert len(self.steps) < MAX_STEPS
            if in_flight is None:
                self.add_arrivals(t)
                self.abort_due(t)
                out, sampled = self.schedule(t)
                if sampled is None:
                    if self.preempt_only:
                        continue  # as in sync mode: schedule again at t
                    t = self.idle(t)
                    if t is None:
                        return
                    continue
                in_flight = (out, sampled, t)
            # Scheduled while in_flight executes: it sees in_flight's placeholders.
            # Its row is for the step that starts when in_flight ends.
            nxt_t = in_flight[2] + 1
            nxt, nxt_sampled = self.schedule(nxt_t)
            self.update(*in_flight)
            t = nxt_t
            self.add_arrivals(t)
            self.abort_due(t)
            in_flight = None if nxt_sampled is None else (nxt, nxt_sampled, t)

    def run(self):
        (self.run_async if self.mode == "async" else self.run_sync)()
        assert not self.s.requests, "requests left in the scheduler"
        reqs = self.case["requests"]
        for r, q in enumerate(reqs):
            if r in self.aborted or r in self.dropped_from or r in self.rejected:
                continue
            assert len(self.tokens[r]) == q["output_len"], (self.case["name"], r)
        return {
            "case": self.case["name"],
            "vllm": self.api.version,
            "mode": self.mode,
            "steps": self.steps,
            "tokens": self.tokens,
            "rejected": self.rejected,
        }

    def group_trace(self):
        """The side record of a hybrid case: blocks per group, one entry per row."""
        assert len(self.group_blocks) == len(self.steps)
        return {"case": self.case["name"], "vllm": self.api.version, "mode": self.mode,
                "kv_groups": self.case["kv_groups"], "group_blocks": self.group_blocks}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=("sync", "async"), required=True)
    ap.add_argument("--model", required=True, help="directory holding only config.json")
    ap.add_argument("--cases", type=Path, default=DATA / "cases")
    ap.add_argument("--out", type=Path, default=DATA / "golden")
    ap.add_argument("--only", nargs="*", help="case names (default: all); writes "
                    "<version>-<mode>.partial.jsonl instead of the golden file")
    ap.add_argument("--any-version", action="store_true",
                    help=f"allow a vLLM other than {', '.join(VERSIONS)}")
    args = ap.parse_args()

    t0 = time.monotonic()
    api = VllmApi()
    if api.version not in VERSIONS and not args.any_version:
        sys.exit(f"vllm {api.version} is not one of the pinned versions {VERSIONS}")
    print(f"vllm {api.version} {args.mode}: imported in {time.monotonic() - t0:.1f} s",
          file=sys.stderr, flush=True)

    files = sorted(args.cases.glob("*.json"))
    cases = [json.loads(f.read_text()) for f in files]
    cases.sort(key=lambda c: c["name"])
    if args.only:
        want = set(args.only)
        cases = [c for c in cases if c["name"] in want]
        missing = want - {c["name"] for c in cases}
        if missing:
            sys.exit(f"no such case: {sorted(missing)}")
    if not cases:
        sys.exit(f"no cases in {args.cases}")

    lines = []
    group_lines = []  # hybrid cases: blocks per KV cache group per row
    for i, c in enumerate(cases):
        t1 = time.monotonic()
        try:
            run = CaseRun(api, c, args.mode, args.model)
        except ValueError as e:  # pydantic's ValidationError is a ValueError
            why = str(e).lower()
            if args.mode != "async" or "async scheduling" not in why or "speculative" not in why:
                raise
            # A combination this release refuses to serve (n-gram drafts with
            # async scheduling: 0.15.1 allows only EAGLE/MTP, 0.33.0 refuses it
            # on the V1 model runner): not recorded.
            print(f"  {c['name']:<14} not recorded: vLLM refuses it: "
                  f"{str(e).splitlines()[1].strip()}", file=sys.stderr, flush=True)
            continue
        if i == 0:
            print(f"  {api.describe(run.s)}", file=sys.stderr, flush=True)
        trace = run.run()
        lines.append(json.dumps(trace, separators=(",", ":")))
        if run.hybrid:
            group_lines.append(json.dumps(run.group_trace(), separators=(",", ":")))
        npre = sum(len(row[3]) for row in trace["steps"])
        hits = sum(h for row in trace["steps"] for _, h in row[2])
        extra = ""
        if c["timeout_steps"] is not None:
            a = run.num_aborts_by_state
            extra = (f" aborts {len(run.aborted)}/{len(c['requests'])} (waiting "
                     f"{a['waiting']}, prefill {a['prefill']}, decode {a['decode']}),"
                     f" dropped tokens {run.num_dropped_tokens}")
            late = run.dropped_from - run.aborted
            if late:
                extra += f", finished but timed out {len(late)}"
        if trace["rejected"]:
            extra += f" rejected {trace['rejected']}"
        if run.spec is not None:
            extra += (f" drafts {run.num_drafts} accepted {run.num_accepted}"
                      f" [{api.describe_spec(run.s)}]")
        if run.hybrid:
            peak = [max((g[k] for g in run.group_blocks), default=0)
                    for k in range(len(c["kv_groups"]))]
            extra += f" {api.describe_hybrid(run.s, c)} peak blocks per group {peak}"
        print(f"  {c['name']:<14} steps {len(trace['steps']):5d}  last "
              f"{trace['steps'][-1][0] if trace['steps'] else -1:5d}  preemptions {npre:4d}"
              f"  hit tokens {hits:6d}{extra}  ({time.monotonic() - t1:.1f} s)",
              file=sys.stderr, flush=True)

    args.out.mkdir(parents=True, exist_ok=True)
    suffix = ".partial.jsonl" if args.only else ".jsonl"
    path = args.out / f"{api.version}-{args.mode}{suffix}"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(path)
    if group_lines:
        # <version>-<mode>.groups.jsonl (or .partial.groups.jsonl) beside it
        gpath = args.out / f"{api.version}-{args.mode}{suffix[:-len('jsonl')]}groups.jsonl"
        gtmp = gpath.with_name(gpath.name + ".tmp")
        gtmp.write_text("\n".join(group_lines) + "\n")
        gtmp.replace(gpath)
        print(f"wrote {gpath} ({len(group_lines)} hybrid cases)", file=sys.stderr)
    print(f"wrote {path} ({path.stat().st_size} bytes, {len(lines)} cases) in "
          f"{time.monotonic() - t0:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
