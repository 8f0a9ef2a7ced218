"""CPU against CUDA (issue 26, point 5): SVI steps per second of the decoder transformer
and NUTS draws per second, each measured on both devices in the same run.

    .venv/bin/python bench/gpu.py [--quick] [--svi-steps 60] [--batch-sizes 32,256]
                                  [--warmup 500] [--samples 500] [--chains 4]
                                  [--only svi|nuts|smc] [--lm FOLDER_OR_NAME]
                                  [--lm-tokens 32] [--json FILE]

For a maintainer with a GPU (the CI machines have none): without a CUDA device
(`torch.cuda.is_available()` false) every CUDA figure is skipped with a printed line and
the CPU figures are still measured.  Figures are printed, never asserted.

What is measured, all through `qvr.inference.fit` as `qvr run` calls it (``pointwise``
off: only the method's loop is of interest; ``seed`` 0):

* SVI — `examples/decoder_lm.qvr` at two sizes: ``shipped`` (the example as it is:
  ``Latent : Real 32``, ``hidden_dim=64``, 2 blocks, about 42 k parameters) and ``large``
  (its text edited in memory: ``Latent : Real 128``, ``hidden_dim=256``, ``stack(block,
  4)``, about 950 k parameters), fitted on the shipped corpus (``data/decoder_lm.json``:
  365 rows of 16 tokens) with the example's 8 Monte-Carlo draws, one ELBO particle, for
  each batch size of ``--batch-sizes`` (``FitConfig.batch_size``: rows per step,
  minibatches drawn without replacement within an epoch; a size at least the row count
  is the full corpus) and ``--svi-steps`` steps.  *steps/s* is taken from the fit's own
  progress events (one per step, ``progress_interval=0``): steps after the first
  `SVI_SKIP` (allocation, the first CUDA kernels, caches) over the fit's clock between
  them; the table also gives *rows/s* (steps/s × batch rows).
* NUTS — 4 chains (``--chains``), ``chain_method="vectorized"``, ``--warmup`` +
  ``--samples`` iterations, on `examples/eight_schools.qvr` (its shipped data) and the
  Bayesian logistic regression of `bench/inference.py` (``logistic_1000x10``: N = 1000,
  D = 10, written in QVR, its seeded synthetic data).  *draws/s* is chains × draws over
  the sampling phase's seconds on the fit's clock (the first sampling progress event to
  the last: warmup and compiling excluded); *total s* is the whole `fit` call's wall
  time (compiling, warmup, sampling and the record); the table also gives the compiler
  the sampler used (`MCMCResult.compiler`) and the divergences.

* SMC steering a pretrained causal LM (issue 40) — ``--lm`` (default the shipped
  `examples/tiny_lm`, a 2-layer GPT-2; any ``save_pretrained`` folder or a name in the
  Hugging Face cache, e.g. ``gpt2``) continuing ``--prompt``, 64 particles, `K` = 3,
  every particle grown to ``--lm-tokens`` tokens (the end token forbidden, so both
  devices do the same work), the KV cache (`qvr.smc.hf_cache` where the model allows it),
  in float32 and bfloat16: *tokens/s* is particles x tokens over the best of three
  `SMCSteering.run` calls (the model loaded once, CUDA synchronised).

A run that raises is printed as ``FAILED: <error>`` (its traceback on stderr) and the
table goes on.  ``--quick`` is a smoke run (SVI: 6 steps, the first batch size only;
NUTS: 30 + 30 iterations), to check the script works, not to quote.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

DECODER = ROOT / "examples" / "decoder_lm.qvr"
EIGHT_SCHOOLS = ROOT / "examples" / "eight_schools.qvr"
DECODER_DRAWS = 8  # the draws the example is fitted with (data/decoder_lm.fit.json)
SVI_SKIP = 3  # first steps left out of the steps/s (allocation, first kernels)
#: the larger decoder: (text in examples/decoder_lm.qvr, replacement)
LARGE_EDITS = (("object Latent : Real 32", "object Latent : Real 128"),
               ("hidden_dim=64", "hidden_dim=256"),
               ("stack(block, 2)", "stack(block, 4)"))


def devices() -> list[str]:
    import torch
    return ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]


def cuda_line() -> str:
    import torch
    if not torch.cuda.is_available():
        return ("CUDA: no device (torch.cuda.is_available() is false): every CUDA figure "
                "is skipped, the CPU figures are measured")
    return (f"CUDA: {torch.cuda.get_device_name(0)} (torch {torch.__version__}, "
            f"CUDA {torch.version.cuda})")


def decoder_source(size: str) -> str:
    src = DECODER.read_text(encoding="utf-8")
    if size == "shipped":
        return src
    for old, new in LARGE_EDITS:
        if old not in src:
            raise RuntimeError(f"{DECODER.name} no longer has {old!r}: update LARGE_EDITS")
        src = src.replace(old, new)
    return src


def decoder_data() -> dict:
    from qvr.datafiles import find_data, load_data
    return load_data(find_data(DECODER))


def _svi_rate(events, skip: int) -> float:
    from qvr.events import FitProgress
    prog = [(e.step, e.elapsed) for e in events
            if isinstance(e, FitProgress) and e.phase == "optimization"]
    if len(prog) <= skip + 1:
        skip = 0
    (s0, t0), (s1, t1) = prog[skip], prog[-1]
    return (s1 - s0) / (t1 - t0) if t1 > t0 else float("nan")


def bench_svi(size: str, batch: int, device: str, steps: int) -> dict:
    import numpy as np
    import qvr
    from qvr.inference import FitConfig, fit
    data = decoder_data()
    rows = int(np.shape(data["next_token"])[0])
    prog = qvr.loads(decoder_source(size))
    params = sum(p.numel() for p in prog.parameters())
    cfg = FitConfig(method="svi", steps=steps, lr=0.01, draws=DECODER_DRAWS, seed=0,
                    device=device, batch_size=batch if batch < rows else None,
                    pointwise=False, progress_interval=0.0)
    events = []
    t0 = time.perf_counter()
    res = fit(prog, data=data, config=cfg, on_event=events.append)
    wall = time.perf_counter() - t0
    if res.status != "finished":
        raise RuntimeError(f"{res.status}: {res.message}")
    rate = _svi_rate(events, SVI_SKIP)
    used = min(batch, rows)
    return {"workload": f"svi decoder_lm {size}", "device": device, "figure": rate,
            "unit": "steps/s", "params": params, "total_s": wall,
            "extra": f"{rate * used:,.0f} rows/s, {used} of {rows} rows a step, "
                     f"{params:,} parameters"}


def logistic_case():
    from inference import logistic_data, logistic_source  # bench/inference.py
    X, y = logistic_data()
    return logistic_source(), {"y": y.long(), **{f"x{j}": X[:, j] for j in range(10)}}


def bench_nuts(name: str, device: str, warmup: int, samples: int, chains: int) -> dict:
    import qvr
    from qvr.inference import FitConfig, fit
    from qvr.events import FitProgress
    if name == "eight_schools":
        prog, data, path = qvr.load(str(EIGHT_SCHOOLS)), None, str(EIGHT_SCHOOLS)
    else:
        src, data = logistic_case()
        prog, path = qvr.loads(src), None
    cfg = FitConfig(method="nuts", num_warmup=warmup, num_samples=samples,
                    num_chains=chains, chain_method="vectorized", seed=0, device=device,
                    pointwise=False)
    events = []
    t0 = time.perf_counter()
    res = fit(prog, data=data, config=cfg, on_event=events.append, program_path=path)
    wall = time.perf_counter() - t0
    if res.status != "finished":
        raise RuntimeError(f"{res.status}: {res.message}")
    times = [e.elapsed for e in events if isinstance(e, FitProgress) and e.phase == "sampling"]
    steps = [e.step for e in events if isinstance(e, FitProgress) and e.phase == "sampling"]
    rate = float("nan")
    if len(times) >= 2 and max(times) > min(times):
        # from the first sampling event (its step already done) to the last
        rate = chains * (max(steps) - min(steps)) / (max(times) - min(times))
    m = res.mcmc
    return {"workload": f"nuts {name}", "device": device, "figure": rate, "unit": "draws/s",
            "extra": f"{getattr(m, 'compiler', '?')}, "
                     f"{int(getattr(m, 'total_divergences', 0) or 0)} div",
            "total_s": wall}


def bench_smc_lm(lm_path: str, dtype: str, device: str, tokens: int, prompt: str,
                 particles: int = 64, repeats: int = 3) -> dict:
    import torch
    from qvr.smc import SMCSteering, forbid_tokens
    from qvr.smc.hf_lm import load_lm
    lm = load_lm(lm_path, dtype=dtype, device=device, prompt=prompt)
    lm.check_length(tokens)
    best = float("inf")
    for _ in range(repeats):
        smc = SMCSteering(lm, potential=forbid_tokens(lm.eos), num_particles=particles,
                          expansion=3, max_len=tokens,
                          generator=torch.Generator().manual_seed(0))
        t0 = time.perf_counter()
        smc.run()
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return {"workload": f"smc {Path(lm_path).name or lm_path}", "device": device,
            "figure": particles * tokens / best, "unit": "tokens/s", "total_s": best,
            "extra": f"{particles} particles x {tokens} tokens, K=3, cache {lm.cache_kind}"}


def _row(r: dict) -> str:
    fig = "FAILED" if r.get("error") else f"{r['figure']:,.2f} {r['unit']}"
    total = f"{r['total_s']:.1f}" if r.get("total_s") is not None else ""
    extra = r.get("error") or r.get("extra", "")
    return (f"{r['workload']:<24} {r['device']:<5} {r['batch']:<10} {fig:>18} "
            f"{total:>8}  {extra}")


HEADER = f"{'workload':<24} {'dev':<5} {'batch':<10} {'figure':>18} {'total s':>8}  notes"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a short smoke run")
    ap.add_argument("--svi-steps", type=int, default=60)
    ap.add_argument("--batch-sizes", default="32,256",
                    help="SVI rows per step, comma-separated (>= 365: the whole corpus)")
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--samples", type=int, default=500)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--only", choices=("svi", "nuts", "smc"), default=None)
    ap.add_argument("--lm", default=str(ROOT / "examples" / "tiny_lm"),
                    help="SMC: the pretrained causal LM (a folder or a Hugging Face cache name)")
    ap.add_argument("--lm-tokens", type=int, default=32, help="SMC: tokens per particle")
    ap.add_argument("--prompt", default="the old dog", help="SMC: the prompt")
    ap.add_argument("--json", default=None, help="write the rows to this file")
    args = ap.parse_args(argv)
    batches = [int(b) for b in args.batch_sizes.split(",") if b.strip()]
    if args.quick:
        args.svi_steps, batches = 6, batches[:1]
        args.warmup, args.samples = 30, 30
    import torch
    print(cuda_line())
    print(f"torch threads {torch.get_num_threads()}; SVI {args.svi_steps} steps "
          f"(steps/s after the first {SVI_SKIP}); NUTS {args.chains} chains x "
          f"({args.warmup} + {args.samples})", flush=True)
    devs = devices()
    jobs = []
    if args.only in (None, "svi"):
        for size in ("shipped", "large"):
            for batch in batches:
                for dev in ("cpu", "cuda"):
                    jobs.append((dev, f"svi decoder_lm {size}", f"batch {batch}",
                                 lambda d=dev, s=size, b=batch: bench_svi(
                                     s, b, d, args.svi_steps)))
    if args.only in (None, "nuts"):
        for name in ("eight_schools", "logistic_1000x10"):
            for dev in ("cpu", "cuda"):
                jobs.append((dev, f"nuts {name}", f"{args.chains} chains",
                             lambda d=dev, n=name: bench_nuts(
                                 n, d, args.warmup, args.samples, args.chains)))
    if args.only in (None, "smc"):
        for dtype in ("float32", "bfloat16"):
            for dev in ("cpu", "cuda"):
                jobs.append((dev, f"smc {Path(args.lm).name or args.lm}", dtype,
                             lambda d=dev, t=dtype: bench_smc_lm(
                                 args.lm, t, d, 8 if args.quick else args.lm_tokens,
                                 args.prompt)))
    rows = []
    print(HEADER, flush=True)
    for dev, workload, batch, job in jobs:
        if dev not in devs:
            print(f"{workload:<24} {dev:<5} {batch:<10} skipped: no CUDA device", flush=True)
            continue
        try:
            r = job()
        except Exception as exc:  # noqa: BLE001 - print and go on
            traceback.print_exc()
            r = {"workload": workload, "device": dev, "batch": batch,
                 "error": f"FAILED: {type(exc).__name__}: {exc}"[:200], "total_s": None}
        r["batch"] = batch
        rows.append(r)
        print(_row(r), flush=True)
    # the table again, CPU and CUDA side by side with their ratio
    print("\nsummary (cuda/cpu: how many times faster the GPU is)")
    print(f"{'workload':<24} {'batch':<10} {'cpu':>16} {'cuda':>16} {'cuda/cpu':>9}")
    keyed = {(r["workload"], r["batch"], r["device"]): r for r in rows}
    for workload, batch in dict.fromkeys((r["workload"], r["batch"]) for r in rows):
        cells = []
        for dev in ("cpu", "cuda"):
            r = keyed.get((workload, batch, dev))
            cells.append(None if r is None or r.get("error") else r["figure"])
        unit = next((r["unit"] for r in rows if r["workload"] == workload and "unit" in r),
                    "")
        text = [f"{c:,.2f} {unit}" if c is not None else
                ("skipped" if dev not in devs else "FAILED")
                for c, dev in zip(cells, ("cpu", "cuda"))]
        ratio = f"{cells[1] / cells[0]:.2f}x" if None not in cells and cells[0] else ""
        print(f"{workload:<24} {batch:<10} {text[0]:>16} {text[1]:>16} {ratio:>9}")
    if args.json:
        Path(args.json).write_text(json.dumps({"cuda": cuda_line(), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
