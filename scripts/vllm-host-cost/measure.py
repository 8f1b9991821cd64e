#!/usr/bin/env python
"""Times the CPU side of vLLM's engine steps with vLLM's own objects.

Run with the python of a venv that has vllm installed (CPU only, no weights):

    VLLM_TARGET_DEVICE=cpu HF_HUB_OFFLINE=1 <venv>/bin/python \
        scripts/vllm-host-cost/measure.py --model DIR --out curves/vllm-<ver>.csv

DIR holds only a config.json (Llama-2-7b-hf's, as for scripts/vllm-conformance).
For every (running sequences, context, step kind) the script builds a
`vllm.v1.core.sched.scheduler.Scheduler` (the real one: KV cache manager,
block pool, prefix hashing), fills it with `running` requests of `context`
prompt tokens, runs them into decode, and then times, per step and with
`time.perf_counter_ns`:

  schedule   Scheduler.schedule()
  update     Scheduler.update_from_output(scheduler_output, ModelRunnerOutput)
             (the ModelRunnerOutput is built untimed, as the workers' reply)
  dispatch   pickle.dumps(SchedulerOutput): what the multiprocess executor's
             shared-memory broadcast does to send the step to the workers
             (vllm/distributed/device_communicators/shm_broadcast.py enqueue)
  encode     MsgpackEncoder.encode_into(EngineCoreOutputs): the engine core's
             output thread (vllm/v1/engine/core.py process_output_sockets)
  decode     MsgpackDecoder(EngineCoreOutputs).decode: the front end's side
  process    OutputProcessor.process_outputs, with incremental detokenization
             (FastIncrementalDetokenizer) into per-request
             RequestOutputCollectors, as AsyncLLM's output handler runs it

Step kinds: `decode` (every running request decodes one token), `prefill`
(the decodes plus one new request's whole prompt of --prefill tokens, admitted
by this very schedule() call), `finish` (the decodes, of which --finish requests
reach max_tokens in this step and are freed by update_from_output).

No tokenizer is available offline: the script trains a byte-level BPE of
32,000 tokens (Llama-2's vocabulary size) with the `tokenizers` library on
generated text and wraps it in transformers' PreTrainedTokenizerFast, which
is what vLLM detokenizes with for a fast tokenizer. Sampled tokens are
pseudo-random ids in [100, 30100); prompts are distinct (no prefix-cache hits).

Output: one CSV row per (part, running, context, kind) with the median and
the 90th percentile of the part's time per step in µs, by the wall clock
(median_us, p90_us: time.perf_counter_ns) and by the thread's CPU clock
(cpu_median_us, cpu_p90_us: time.thread_time_ns, which leaves out the time
the process was preempted: on a host shared with other work, the figure to
use; the process is single-threaded here, as vLLM's busy loop is).
"""
import argparse
import csv
import gc
import os
import pickle
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "vllm-conformance"))
sys.dont_write_bytecode = True
from driver import VllmApi  # noqa: E402

PARTS = ("schedule", "update", "dispatch", "encode", "decode", "process", "prepare")
BUDGET = 8192  # max_num_batched_tokens of the real runs (InferenceX, BLIS H100)
BLOCK = 16


def build_tokenizer(cache, vocab_size=32000):
    """A byte-level BPE trained in memory (no real tokenizer offline), kept in
    `cache` (a tokenizer.json) for the next run: training takes ~30 s."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if cache is not None and cache.exists():
        tok = Tokenizer.from_file(str(cache))
        return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")

    rng = random.Random(0)
    syll = ["ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "an", "er", "in", "on",
            "st", "th", "qu", "pr", "ch", "sh", "ex", "ul", "or", "ad", "em", "ip"]
    words = ["".join(rng.choice(syll) for _ in range(rng.randint(1, 5)))
             for _ in range(60000)]
    text = [" ".join(rng.choice(words) for _ in range(40)) + ".\n" for _ in range(40000)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<s>", "</s>"])
    tok.train_from_iterator(text, trainer)
    assert tok.get_vocab_size() >= 30100, tok.get_vocab_size()
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tok.save(str(cache))
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")


def make_runner(vllm_config):
    """vLLM's CPU model runner (a GPUModelRunner whose device tensors are its
    CPU buffers), without a model: only its persistent batch is used."""
    import torch
    import vllm.utils.platform_utils as pu
    import vllm.v1.worker.gpu_model_runner as gmr
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner
    # This CUDA wheel believes in pinned memory; there is no driver to pin with.
    pu.is_pin_memory_available = lambda: False
    gmr.is_pin_memory_available = lambda: False
    # One rank, no pipeline: what _update_states asks of the (uninitialized)
    # process groups.
    gmr.get_pp_group = lambda: SimpleNamespace(is_last_rank=True, is_first_rank=True,
                                               world_size=1, rank_in_group=0)
    return CPUModelRunner(vllm_config, torch.device("cpu"))


def prepare(runner, out):
    """The input preparation of GPUModelRunner.execute_model (vLLM 0.15.1,
    vllm/v1/worker/gpu_model_runner.py): the persistent batch's update and
    _prepare_inputs (positions, token ids, block table, slot mapping, logits
    indices), up to where the attention metadata is built."""
    import numpy as np
    runner._update_states(out)
    if not out.total_num_scheduled_tokens:
        return
    req_ids = runner.input_batch.req_ids
    tokens = [out.num_scheduled_tokens[i] for i in req_ids]
    runner._prepare_inputs(out, np.array(tokens, dtype=np.int32))


def stamp():
    """(wall, this thread's CPU) in ns: the CPU clock leaves out the time the
    thread was preempted, which on a shared host is most of the noise."""
    return (time.perf_counter_ns(), time.thread_time_ns())


def span(a, b):
    return (b[0] - a[0], b[1] - a[1])


class Bench:
    def __init__(self, api, model_dir, tokenizer):
        from vllm.sampling_params import RequestOutputKind, SamplingParams
        from vllm.v1.engine import EngineCoreOutputs, EngineCoreRequest
        from vllm.v1.engine.output_processor import (OutputProcessor,
                                                     RequestOutputCollector)
        from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder

        self.api = api
        self.model_dir = model_dir
        self.tokenizer = tokenizer
        self.SamplingParams, self.RequestOutputKind = SamplingParams, RequestOutputKind
        self.EngineCoreRequest, self.EngineCoreOutputs = EngineCoreRequest, EngineCoreOutputs
        self.OutputProcessor, self.Collector = OutputProcessor, RequestOutputCollector
        self.encoder = MsgpackEncoder()
        self.decoder = MsgpackDecoder(EngineCoreOutputs)
        self.rng = random.Random(1)
        self.with_prepare = True

    def setup(self, running, context, extra_tokens):
        blocks = (running + 2) * ((context + extra_tokens) // BLOCK + 4) + 64
        eng = {"max_num_seqs": running + 1, "max_num_batched_tokens": BUDGET,
               "long_prefill_token_threshold": 0, "num_gpu_blocks": blocks,
               "block_size": BLOCK, "enable_prefix_caching": True,
               "max_model_len": 4096}
        self.s = self.api.scheduler(eng, "sync", self.model_dir)
        self.runner = None
        if self.with_prepare:
            self.runner = make_runner(self.s.vllm_config)
            # initialize_kv_cache's record of the groups (one full-attention
            # group); FlashAttention sets no reorder_batch_threshold.
            self.runner.kv_cache_config = self.s.kv_cache_config
        self.op = self.OutputProcessor(self.tokenizer, log_stats=False)
        self.collectors = {}
        self.next_id = 0
        for _ in range(running):
            self.add(context, 1_000_000)
        self.settle()

    def add(self, prompt_len, max_tokens):
        """A new request, to the scheduler and to the front end's processor."""
        rid = str(self.next_id)
        self.next_id += 1
        # distinct prompts (no prefix-cache hits between requests), no token 7
        prompt = [100 + (i * 7919 + int(rid) * 104729) % 30000 for i in range(prompt_len)]
        max_tokens = min(max_tokens, 4096 - prompt_len)
        self.s.add_request(self.api.request(rid, prompt, max_tokens, BLOCK, 0.0))
        sp = self.SamplingParams(ignore_eos=True, max_tokens=max_tokens,
                                 output_kind=self.RequestOutputKind.DELTA)
        ecr = self.EngineCoreRequest(
            request_id=rid, prompt_token_ids=prompt, mm_features=None,
            sampling_params=sp, pooling_params=None, eos_token_id=1,
            arrival_time=0.0, lora_request=None, cache_salt=None,
            data_parallel_rank=None)
        if "external_req_id" in self.EngineCoreRequest.__struct_fields__:
            ecr.external_req_id = rid  # InputProcessor.assign_request_id (0.14+)
        try:
            q = self.Collector(self.RequestOutputKind.DELTA, rid)
        except TypeError:  # vLLM < 0.14: no request id
            q = self.Collector(self.RequestOutputKind.DELTA)
        self.collectors[rid] = q
        self.op.add_request(ecr, None, None, 0, q)
        return rid

    def runner_output(self, out):
        """The workers' reply: a token for every request whose step reaches the
        end of its sequence (a partial prefill chunk samples nothing)."""
        req_ids = list(out.num_scheduled_tokens)
        sampled = {}
        for rid in req_ids:
            rq = self.s.requests[rid]
            sampled[rid] = rq.num_computed_tokens + out.num_scheduled_tokens[rid] >= rq.num_tokens
        mro = self.api.runner_output(req_ids, sampled)
        # What the GPU runner sends for a generation model (0.12's dataclass
        # has no defaults for these).
        if getattr(mro, "prompt_logprobs_dict", {}) is None:
            mro.prompt_logprobs_dict = {}
        if getattr(mro, "pooler_output", []) is None:
            mro.pooler_output = []
        mro.sampled_token_ids = [[self.rng.randrange(100, 30100)] if sampled[r] else []
                                 for r in req_ids]
        return mro

    def step(self, times=None):
        """One engine step; with `times`, each part's ns is appended to it."""
        pc = stamp
        t0 = pc()
        out = self.s.schedule()
        t1 = pc()
        blob = pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL)
        t2 = pc()
        n_prep = None
        if self.runner is not None:
            p0 = pc()
            prepare(self.runner, out)
            n_prep = span(p0, pc())
        mro = self.runner_output(out)
        t3 = pc()
        eco = self.s.update_from_output(out, mro)
        t4 = pc()
        n_enc = n_dec = n_proc = (0, 0)
        add = lambda a, b: (a[0] + b[0], a[1] + b[1])  # noqa: E731
        for outputs in eco.values():
            e0 = pc()
            frames = self.encoder.encode_into(outputs, bytearray())
            e1 = pc()
            decoded = self.decoder.decode(frames)
            e2 = pc()
            self.op.process_outputs(decoded.outputs, decoded.timestamp, None)
            e3 = pc()
            n_enc = add(n_enc, span(e0, e1))
            n_dec = add(n_dec, span(e1, e2))
            n_proc = add(n_proc, span(e2, e3))
        del blob
        if times is not None:
            spans = (span(t0, t1), span(t3, t4), span(t1, t2), n_enc, n_dec, n_proc, n_prep)
            for part, ns in zip(PARTS, spans):
                if ns is not None:
                    times[part].append(ns)
        # the per-request generate() tasks take their outputs (untimed)
        for rid in [r for r in out.num_scheduled_tokens]:
            q = self.collectors.get(rid)
            if q is not None and q.output is not None:
                q.output = None
        for rid in list(self.collectors):
            if rid not in self.s.requests:
                del self.collectors[rid]
        return out

    def settle(self):
        """Untimed steps until every request is decoding."""
        while any(rq.num_computed_tokens < rq.num_tokens - 1 for rq in self.s.requests.values()):
            self.step()

    def measure(self, running, context, kind, reps, warmup, prefill, finish):
        self.setup(running, context, reps + warmup + 64 + prefill)
        times = {p: [] for p in PARTS}
        scheduled_tokens = None
        finished = 0
        for i in range(warmup + reps):
            rec = times if i >= warmup else None
            if kind == "decode":
                out = self.step(rec)
            elif kind == "prefill":
                new = self.add(prefill, 1_000_000)
                out = self.step(rec)
                assert out.num_scheduled_tokens[new] == prefill
                self.s.finish_requests(new, self.api.RequestStatus.FINISHED_ABORTED)
                try:
                    self.op.abort_requests([new], internal=True)
                except TypeError:  # vLLM < 0.14
                    self.op.abort_requests([new])
                self.collectors.pop(new, None)
            else:  # finish: `finish` running requests reach max_tokens in this step
                victims = list(self.s.running)[:finish]
                for rq in victims:
                    rq.max_tokens = rq.num_output_tokens + 1
                    st = self.op.request_states[rq.request_id]
                    st.max_tokens_param = rq.max_tokens
                out = self.step(rec)
                assert all(rq.request_id not in self.s.requests for rq in victims)
                for _ in victims:
                    self.add(context, 1_000_000)
                self.settle()
            if rec is not None:
                scheduled_tokens = out.total_num_scheduled_tokens
                finished = finish if kind == "finish" else 0
        n_running = running + (1 if kind == "prefill" else 0)
        rows = []
        for p in PARTS:
            if not times[p]:
                continue
            wall = sorted(ns[0] / 1000.0 for ns in times[p])
            cpu = sorted(ns[1] / 1000.0 for ns in times[p])
            p90 = lambda us: us[min(len(us) - 1, int(round(0.9 * (len(us) - 1))))]  # noqa: E731
            rows.append({"part": p, "running": n_running, "context": context, "kind": kind,
                         "scheduled_tokens": scheduled_tokens, "finished": finished,
                         "median_us": round(statistics.median(wall), 2),
                         "p90_us": round(p90(wall), 2),
                         "cpu_median_us": round(statistics.median(cpu), 2),
                         "cpu_p90_us": round(p90(cpu), 2), "reps": len(wall)})
        return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="directory holding only config.json")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--running", default="1,2,4,8,16,32,64,128,256")
    ap.add_argument("--contexts", default="200,1000,2000")
    ap.add_argument("--kinds", default="decode,prefill,finish")
    ap.add_argument("--prefill", default="256,2048",
                    help="prompt tokens of the prefill kind (comma-separated sizes)")
    ap.add_argument("--finish", type=int, default=1, help="requests finishing in a finish step")
    ap.add_argument("--tokenizer-cache", type=Path, default=None,
                    help="tokenizer.json to reuse (written on first use)")
    ap.add_argument("--no-prepare", action="store_true",
                    help="skip the model runner's input preparation")
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    args = ap.parse_args()

    t0 = time.monotonic()
    api = VllmApi()
    tok = build_tokenizer(args.tokenizer_cache)
    bench = Bench(api, args.model, tok)
    bench.with_prepare = not args.no_prepare
    print(f"vllm {api.version}, python {platform.python_version()}, "
          f"tokenizer ready in {time.monotonic() - t0:.1f} s", file=sys.stderr, flush=True)
    fields = ["version", "part", "running", "context", "kind", "scheduled_tokens",
              "finished", "median_us", "p90_us", "cpu_median_us", "cpu_p90_us", "reps"]
    rows = []
    plan = []
    for kind in args.kinds.split(","):
        for size in (map(int, args.prefill.split(",")) if kind == "prefill" else [0]):
            plan.append((kind, size))
    for kind, size in plan:
        for context in map(int, args.contexts.split(",")):
            for running in map(int, args.running.split(",")):
                if kind == "finish" and running < args.finish:
                    continue
                t1 = time.monotonic()
                gc.collect()
                got = bench.measure(running, context, kind, args.reps, args.warmup,
                                    size, args.finish)
                for r in got:
                    r["version"] = api.version
                rows.extend(got)
                med = {r["part"]: r["cpu_median_us"] for r in got}
                print(f"  {kind:8s} ctx {context:5d} running {running:4d}: " +
                      " ".join(f"{p} {med[p]:8.1f}" for p in PARTS) +
                      f"  ({time.monotonic() - t1:.1f} s)", file=sys.stderr, flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(args.out.name + ".tmp")
    with tmp.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    tmp.replace(args.out)
    print(f"wrote {args.out} ({len(rows)} rows) in {time.monotonic() - t0:.0f} s",
          file=sys.stderr)


if __name__ == "__main__":
    main()
