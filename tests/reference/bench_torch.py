"""bench_torch.py - PyTorch baseline for `make bench`: the bench model (configgen/configs/runs/
bench.yml via config.py) in float32 (or, --bf16, under CPU autocast to bfloat16), random init, timed forward + backward + clipping + AdamW
steps on random tokens (per_device_batch_size x max_target_length = 4 x 256).

Prints ONE JSON line on stdout:
  {"impl":"pytorch","tokens_per_s":..,"step_s":..,"threads":..,"gdn":"recurrent|chunked", ...}
with torch's default thread count; "threads1_*" fields repeat the measurement with
torch.set_num_threads(1) unless --no-single. The GDN form (recurrent or chunked WY, same math)
is chosen by timing one GDN layer's forward + backward in each form; the losing form's time is reported too. Progress goes
to stderr. --run names another run config (make bench-slice: bench-80b-slice); --gdn chunked
or recurrent skips the probe (the recurrent form's autograd graph keeps every token's state:
at S = 4096 with 32 value heads of 128 x 128 that is tens of GiB, so the slice uses chunked).
"""
import argparse
import json
import os
import resource
import sys
import time

sys.dont_write_bytecode = True  # keep tests/reference free of __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import config  # noqa: E402
import model  # noqa: E402


def make_step(dm, P, opt, names, chunk, bf16=False):
    lb_c = model.lb_coefficient(dm)

    def step(i, inp, tgt):
        # bf16: CPU autocast (what a PyTorch bf16 user gets: matmuls in bf16, the loss and
        # reductions in fp32); the parameters, gradients and AdamW stay fp32
        with torch.autocast('cpu', dtype=torch.bfloat16, enabled=bf16):
            loss = model.loss_fn(P, dm, inp, tgt, lb_c=lb_c, chunk=chunk)[0]
        gl = torch.autograd.grad(loss, [P[n] for n in names])
        grads = dict(zip(names, gl))
        model.clip_grads(grads, dm['gradient_clipping_threshold'])
        opt.step(P, grads, model.lr_at(dm, i))
        return float(loss)
    return step


def time_steps(dm, chunk, n, seed=0, warmup=1, bf16=False):
    torch.manual_seed(seed)
    P = {k: v.requires_grad_(True) for k, v in model.init_params(dm, seed, torch.float32).items()}
    names = [n_ for n_, _, _ in model.param_specs(dm)]
    opt = model.AdamW(dm, P)
    step = make_step(dm, P, opt, names, chunk, bf16)
    B, S = dm['B'], dm['S']
    batches = [(torch.randint(0, dm['V'], (B, S)), torch.randint(0, dm['V'], (B, S)))
               for _ in range(n + warmup)]
    for i in range(warmup):                    # warm-up (allocator, first-call overheads)
        step(i + 1, *batches[i])
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(n):
        t1, c1 = time.perf_counter(), time.process_time()
        step(warmup + i + 1, *batches[warmup + i])
        print('bench_torch: step %d %.2f s (%.2f s of CPU)' % (
            warmup + i + 1, time.perf_counter() - t1, time.process_time() - c1), file=sys.stderr)
    time_steps.cpu_s = (time.process_time() - c0) / n   # on a shared machine: CPU per step
    return (time.perf_counter() - t0) / n


def probe_gdn(dm, chunk, reps=2):
    """Forward + backward of one GDN layer at the bench shape (cheap stand-in for a full
    step: the GDN form only changes this part)."""
    torch.manual_seed(0)
    P = {k: v.requires_grad_(True) for k, v in model.init_params(dm, 0, torch.float32).items()}
    h = torch.randn(dm['B'] * dm['S'], dm['d'], requires_grad=True)
    best = None
    for _ in range(reps):
        t0 = time.perf_counter()
        y = model.gdn_layer(P, 'model.layers.0.linear_attn.', h, dm, dm['B'], dm['S'], chunk)
        y.sum().backward()
        t = time.perf_counter() - t0
        best = t if best is None else min(best, t)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--run', default='bench')
    ap.add_argument('--steps', type=int, default=2)
    ap.add_argument('--no-single', action='store_true')
    ap.add_argument('--gdn', choices=('probe', 'recurrent', 'chunked'), default='probe')
    ap.add_argument('--bf16', action='store_true',
                    help='CPU autocast to bfloat16 around the forward (the bf16 baseline)')
    ap.add_argument('--warmup', type=int, default=1,
                    help='untimed steps first (0: time the first step; the slice uses 0: one '
                         'step of it passes 20 GiB resident, a warm-up step doubles the time)')
    args = ap.parse_args()
    dm = config.dims(config.load(args.run))
    tokens = dm['B'] * dm['S']
    threads = torch.get_num_threads()
    if args.gdn == 'probe':
        t_rec = probe_gdn(dm, None)
        t_chk = probe_gdn(dm, dm['chunk'])
        chunk = dm['chunk'] if t_chk < t_rec else None
        print('bench_torch: one GDN layer fwd+bwd recurrent %.3fs, chunked(%d) %.3fs'
              % (t_rec, dm['chunk'], t_chk), file=sys.stderr)
    else:
        t_rec = t_chk = None
        chunk = dm['chunk'] if args.gdn == 'chunked' else None
    step_s = time_steps(dm, chunk, args.steps, warmup=args.warmup, bf16=args.bf16)
    out = {'impl': 'pytorch', 'tokens_per_s': tokens / step_s, 'step_s': step_s,
           'threads': threads, 'gdn': 'chunked' if chunk else 'recurrent',
           'gdn_probe_s': {'recurrent': t_rec, 'chunked': t_chk},
           'cpu_step_s': time_steps.cpu_s,
           'tokens_per_step': tokens, 'run': args.run,
           'dtype': 'bfloat16 (autocast)' if args.bf16 else 'float32',
           'warmup_steps': args.warmup}
    if not args.no_single and threads != 1:
        torch.set_num_threads(1)
        s1 = time_steps(dm, chunk, args.steps, warmup=args.warmup, bf16=args.bf16)
        out['threads1_step_s'] = s1
        out['threads1_tokens_per_s'] = tokens / s1
        torch.set_num_threads(threads)
    out['peak_rss_mib'] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(json.dumps(out, sort_keys=True))
    return 0


if __name__ == '__main__':
    sys.exit(main())
