"""Runs our GPU path of one family a few times on one input, for a profiler.

  ncu --kernel-name regex:Wgmma --launch-skip 2 --launch-count 1 \
      python3 bench/profile_family.py --lib PATH --family A --batch 32

Builds the module and our launcher exactly as bench/kernel_bench.py does (same
configurations), runs `--runs` times on one random input and synchronises;
nothing is timed or checked here (kernel_bench.py does that)."""

import argparse
import json

import torch

import kernel_bench


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--lib", required=True)
  parser.add_argument("--family", required=True, choices=["A", "B", "C"])
  parser.add_argument("--batch", type=int, required=True)
  parser.add_argument("--precision", default=None, help="default: the configuration's")
  parser.add_argument("--runs", type=int, default=4)
  parser.add_argument("--pin", default=None,
                      help="options pinning one of our algorithms, as JSON (make_ours' options), "
                           "e.g. '{\"schedule\": \"lagged\", \"lag\": 224, \"ctas\": 2}'")
  args = parser.parse_args()

  torch.manual_seed(0)
  torch.ones(8, 8, device="cuda") @ torch.ones(8, 8, device="cuda")
  capi = kernel_bench.Capi(args.lib)
  for _, family, spec, precision, shape, _, _, options in kernel_bench.configurations(False):
    if family != args.family or options:
      continue
    if args.precision and precision != args.precision:
      continue
    shape = (args.batch,) + tuple(shape[1:])
    module = kernel_bench.build_module(family, spec)
    pinned = json.loads(args.pin) if args.pin else None
    ours = kernel_bench.make_ours(capi, family, module, spec, precision, shape, pinned)
    x = torch.rand(shape, device="cuda")
    with torch.no_grad():
      for _ in range(args.runs):
        ours(x)
    torch.cuda.synchronize()
    print(f"ran family {family} batch {args.batch} {precision} x{args.runs}")
    return
  raise SystemExit(f"no configuration of family {args.family}")


if __name__ == "__main__":
  main()
