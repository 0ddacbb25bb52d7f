#!/usr/bin/env python3
"""A small PyTorch DDP training program that Stagecraft launches as "another program".

It initialises torch.distributed from torchrun's environment (env://, gloo), trains a linear
regression on fixed synthetic data with DistributedDataParallel, and prints one metric line per
step in the format asked for (--format megatron|deepspeed|nanogpt|jsonl|torchtitan), as those programs
print them. Faults for the tests: --crash-rank/--crash-step kill one rank with SIGKILL,
--hang-step makes every rank stop printing and wait. Arguments it does not know (a framework's,
passed by `run --framework`) are accepted and written to --argv-file with the rest.
"""
import argparse
import json
import os
import signal
import sys
import threading
import time


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--format", default="nanogpt", choices=["megatron", "deepspeed", "nanogpt", "jsonl", "torchtitan"])
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--step-sleep", type=float, default=0.0)
    p.add_argument("--crash-rank", type=int, default=-1)
    p.add_argument("--crash-step", type=int, default=-1)
    p.add_argument("--hang-step", type=int, default=-1)
    p.add_argument("--out-dir", default="")   # each rank writes rank-R.json: its environment and pid
    p.add_argument("--tag", default="")       # marks the processes of one test run
    return p.parse_known_args()


def main():
    args, unknown = parse()
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    if args.out_dir:
        keys = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
                "CUDA_VISIBLE_DEVICES"]
        with open(os.path.join(args.out_dir, "rank-%d.json" % rank), "w") as f:
            json.dump({"env": {k: os.environ.get(k) for k in keys}, "pid": os.getpid(), "argv": sys.argv[1:],
                       "unknown": unknown, "cwd": os.getcwd()}, f)

    # Importing torch and meeting the other ranks take seconds on a busy machine: say so until
    # the first step is done, so that a short hang timeout measures the training, not the start.
    started = threading.Event()

    def heartbeat():
        while not started.wait(1.0):
            print("rank %d: starting" % rank, flush=True)

    threading.Thread(target=heartbeat, daemon=True).start()
    import datetime
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=120))
    print("rank %d of %d: process group ready" % (rank, dist.get_world_size()), flush=True)
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    g = torch.Generator().manual_seed(1)
    true_w = torch.randn(16, 1, generator=g)
    per_rank = 8
    gbs = per_rank * world
    x_all = torch.randn(gbs, 16, generator=g)
    y_all = x_all @ true_w
    x, y = x_all[rank * per_rank:(rank + 1) * per_rank], y_all[rank * per_rank:(rank + 1) * per_rank]
    # Megatron prints on the last rank; the others on rank 0.
    printer = world - 1 if args.format == "megatron" else 0

    for step in range(1, args.steps + 1):
        t0 = time.time()
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        grad_norm = torch.norm(torch.stack([p.grad.norm() for p in model.parameters()])).item()
        opt.step()
        # The mean loss over the ranks, as the frameworks report it.
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        mean = mean.item() / world
        if args.step_sleep > 0:
            time.sleep(args.step_sleep)
        ms = (time.time() - t0) * 1000.0
        if rank == args.crash_rank and step == args.crash_step:
            os.kill(os.getpid(), signal.SIGKILL)
        if rank == printer:
            emit(args.format, step, args.steps, mean, args.lr, grad_norm, ms, gbs)
        started.set()
        if step == args.hang_step:
            time.sleep(3600)
    dist.barrier()
    print("rank %d: done" % rank, flush=True)


def emit(fmt, step, steps, loss, lr, grad_norm, ms, gbs):
    if fmt == "megatron":
        print(" [%s] iteration %8d/%8d | consumed samples: %12d | elapsed time per iteration (ms): %.1f | "
              "learning rate: %.6E | global batch size: %5d | lm loss: %.6E | loss scale: 1.0 | grad norm: %.3f | "
              "number of skipped iterations:   0 | number of nan iterations:   0 |"
              % (time.strftime("%Y-%m-%d %H:%M:%S"), step, steps, step * gbs, ms, lr, gbs, loss, grad_norm), flush=True)
    elif fmt == "deepspeed":
        print("[Rank 0] step=%d, skipped=0, lr=[%s], mom=[(0.9, 0.999)]" % (step, repr(lr)), flush=True)
        print("epoch=0/micro_step=%d/global_step=%d, RunningAvgSamplesPerSec=%.3f, CurrSamplesPerSec=%.3f, "
              "MemAllocated=0.01GB, MaxMemAllocated=0.02GB" % (step, step, gbs * 1000.0 / ms, gbs * 1000.0 / ms), flush=True)
        print("steps: %d loss: %.4f iter time (s): %.3f samples/sec: %.3f" % (step, loss, ms / 1000.0, gbs * 1000.0 / ms),
              flush=True)
    elif fmt == "nanogpt":
        print("iter %d: loss %.4f, time %.2fms, mfu %.2f%%" % (step, loss, ms, -100.0), flush=True)
    elif fmt == "torchtitan":
        # torchtitan's coloured step line behind its log prefix; tps per device.
        tps = gbs * 1000.0 / ms / max(1, int(os.environ.get("WORLD_SIZE", "1")))
        print("[rank0]:[titan] %s - root - INFO - \x1b[31mstep: %2d  \x1b[32mloss: %8.5f  \x1b[33mgrad_norm: %7.4f  "
              "\x1b[34mmemory:  0.01GiB(0.01%%)  \x1b[35mtps: %s  \x1b[36mtflops: 0.42  \x1b[35mmfu: 1.25%%\x1b[39m"
              % (time.strftime("%Y-%m-%d %H:%M:%S,000"), step, loss, grad_norm, "{:,}".format(round(tps))), flush=True)
    else:
        print(json.dumps({"step": step, "loss": loss, "lr": lr, "grad_norm": grad_norm, "step_ms": ms}), flush=True)


if __name__ == "__main__":
    main()
