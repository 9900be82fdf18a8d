#!/usr/bin/env python3
"""Times fuseserve's GPU path of each model family next to PyTorch eager and
torch.compile of the same module, in one run on one GPU (REFERENCE.md §10):

- CUDA events on the stream that does the work (PyTorch's current stream,
  which our launchers are given), warm-up, median of the timed trials;
- the L2 cache flushed (a 256 MiB buffer rewritten) before every trial;
- fresh random inputs for every trial;
- accuracy checked for every timed configuration against a float64 run of
  the same module, on U[0,1) and N(0,1) inputs with random GroupNorm affine
  parameters, under the contract of SPEC.md §1.4; our output is poisoned
  with NaN first so that an unwritten element fails.

Our kernels are reached through libfuseserve_kernels_capi.so (ctypes).
Usage: kernel_bench.py --lib PATH [--out DIR] [--quick]
"""

import argparse
import ctypes
import json
import math
import os
import statistics
import sys
import time

# Growable segments: after families A and B, the caching allocator's
# fixed-size blocks left family C's largest rows (several 7.5 GB tensors)
# out of memory on an 80 GB card.
os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

TOLERANCE = {"fp32": (5e-6, 1e-4), "tf32": (1e-3, 1e-2)}
L2_FLUSH_BYTES = 256 << 20


class ConvFamily(torch.nn.Module):
  def __init__(self, c_in, c_out, k, stride, padding, output_padding, groups, eps):
    super().__init__()
    self.conv_transpose = torch.nn.ConvTranspose2d(c_in, c_out, k, stride=stride,
                                                   padding=padding,
                                                   output_padding=output_padding)
    self.group_norm = torch.nn.GroupNorm(groups, c_out, eps=eps)

  def forward(self, x):
    return self.group_norm(F.gelu(self.conv_transpose(x)))


class GemmFamily(torch.nn.Module):
  def __init__(self, f_in, f_out, groups, lo, hi, eps):
    super().__init__()
    self.gemm = torch.nn.Linear(f_in, f_out)
    self.bias = torch.nn.Parameter(torch.randn(f_out))
    self.hardtanh = torch.nn.Hardtanh(lo, hi)
    self.mish = torch.nn.Mish()
    self.groupnorm = torch.nn.GroupNorm(groups, f_out, eps=eps)

  def forward(self, x):
    return self.groupnorm(self.mish(self.hardtanh(self.gemm(x) + self.bias)))


class GroupNormFamily(torch.nn.Module):
  def __init__(self, channels, groups, eps):
    super().__init__()
    self.gn = torch.nn.GroupNorm(groups, channels, eps=eps)

  def forward(self, x):
    return self.gn(x)


def randomize_affine(norm):
  with torch.no_grad():
    norm.weight.copy_(1 + 0.1 * torch.randn_like(norm.weight))
    norm.bias.copy_(0.1 * torch.randn_like(norm.bias))


class Capi:
  def __init__(self, path):
    lib = ctypes.CDLL(path)
    i64, f64, vp, cp = ctypes.c_int64, ctypes.c_double, ctypes.c_void_p, ctypes.c_char_p
    lib.fs_conv_prepared_weight_size.restype = i64
    lib.fs_conv_prepared_weight_size.argtypes = [i64] * 5
    lib.fs_conv_prepare_weight.argtypes = [i64] * 5 + [vp, vp, cp, i64]
    lib.fs_conv_workspace_bytes.restype = i64
    lib.fs_conv_workspace_bytes.argtypes = [i64] * 10 + [f64, i64]
    lib.fs_conv_family.argtypes = [i64] * 10 + [f64, i64] + [vp] * 8 + [cp, i64] + [i64] * 2
    lib.fs_cublas_create.restype = vp
    lib.fs_cublas_create.argtypes = [vp]
    lib.fs_cublas_destroy.argtypes = [vp]
    lib.fs_gemm_workspace_bytes.argtypes = [i64] * 6
    lib.fs_gemm_workspace_bytes.restype = i64
    lib.fs_gemm_prepare_tf32x3.argtypes = [i64, i64, vp, vp, cp, i64]
    lib.fs_gemm_family.argtypes = ([vp] + [i64] * 4 + [f64] * 3 + [i64] * 3 + [vp] * 10 +
                                   [cp, i64])
    lib.fs_groupnorm_workspace_bytes.restype = i64
    lib.fs_groupnorm_workspace_bytes.argtypes = [i64] * 4
    lib.fs_groupnorm_family.argtypes = [i64] * 4 + [f64] + [i64] * 3 + [vp] * 6 + [cp, i64]
    self.lib = lib
    self.error = ctypes.create_string_buffer(1024)

  def check(self, rc):
    if rc != 0:
      raise RuntimeError(self.error.value.decode())


def ptr(t):
  return ctypes.c_void_p(t.data_ptr())


def stream_ptr():
  return ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)


GEMM_ALGORITHMS = {"auto": 0, "small": 1, "sgemm": 2, "tf32x3": 3, "skinny": 4}
GROUPNORM_SCHEDULES = {"auto": 0, "two-read": 1, "lagged": 2, "resident": 3}
CONV_GROUPNORM_SCHEDULES = {"auto": 0, "after": 1, "concurrent": 2}
# Extra pinned GroupNorm rows of family C at n >= 16, beside the library's
# choice and the two-read and lagged rows (--gn-variants): (schedule, lag in
# chunks of 64 KiB, CTAs per SM), e.g. ("lagged", 224, 3). None by default:
# the lagged schedule's knobs were measured around its defaults in v28
# (bench/kernel_notes.md).
DEFAULT_GN_VARIANTS = ()
# The library's own choice (families.h kMinConcurrentGroupNormBatch).
MIN_CONCURRENT_GROUPNORM_BATCH = 8


def make_ours(capi, family, module, spec, precision, input_shape, options=None):
  """A callable x -> y running our GPU path for `module` on `input_shape`.

  options pin an algorithm instead of the library's own choice: family A
  {"schedule": one of CONV_GROUPNORM_SCHEDULES, "sms": multiprocessors left to a
  concurrent GroupNorm}, family B {"algorithm": one of GEMM_ALGORITHMS, "slices": n}, family C
  {"schedule": one of GROUPNORM_SCHEDULES, "lag": chunks, "ctas": CTAs per SM}."""
  options = options or {}
  tf32 = 1 if precision == "tf32" else 0
  if family == "A":
    c_in, c_out, k, stride, pad, opad, groups, eps = spec
    conv = module.conv_transpose
    size = capi.lib.fs_conv_prepared_weight_size(c_in, c_out, k, stride, tf32)
    if size <= 0:
      raise RuntimeError("invalid convolution parameters")
    host_w = np.ascontiguousarray(conv.weight.detach().cpu().numpy(), dtype=np.float32)
    host_p = np.empty(size, dtype=np.float32)
    capi.check(capi.lib.fs_conv_prepare_weight(c_in, c_out, k, stride, tf32,
                                               host_w.ctypes.data, host_p.ctypes.data,
                                               capi.error, 1024))
    prepared = torch.from_numpy(host_p).cuda()
    n, _, h, w = input_shape
    ws = torch.empty(max(1, capi.lib.fs_conv_workspace_bytes(n, c_in, c_out, h, w, k, stride, pad,
                                                             opad, groups, eps, tf32)),
                     dtype=torch.uint8, device="cuda")
    h_out = (h - 1) * stride - 2 * pad + k + opad
    w_out = (w - 1) * stride - 2 * pad + k + opad
    gn = module.group_norm
    schedule = CONV_GROUPNORM_SCHEDULES[options.get("schedule", "auto")]
    gn_sms = options.get("sms", 0)

    def run(x, out=None):
      y = out if out is not None else torch.empty((n, c_out, h_out, w_out), device="cuda")
      capi.check(capi.lib.fs_conv_family(n, c_in, c_out, h, w, k, stride, pad, opad, groups, eps,
                                         tf32, ptr(x), ptr(prepared), ptr(conv.bias),
                                         ptr(gn.weight), ptr(gn.bias), ptr(y), ptr(ws),
                                         stream_ptr(), capi.error, 1024, schedule, gn_sms))
      return y
    return run
  if family == "B":
    f_in, f_out, groups, lo, hi, eps = spec
    handle = capi.lib.fs_cublas_create(stream_ptr())
    if not handle:
      raise RuntimeError("cublasCreate failed")
    n = input_shape[0]
    m = module
    algorithm = GEMM_ALGORITHMS[options.get("algorithm", "auto")]
    slices = options.get("slices", 0)
    # The 3xTF32 copy of the weight, made once as the server makes it at load.
    host_w = np.ascontiguousarray(m.gemm.weight.detach().cpu().numpy(), dtype=np.float32)
    host_split = np.empty(2 * host_w.size, dtype=np.float32)
    capi.check(capi.lib.fs_gemm_prepare_tf32x3(f_in, f_out, host_w.ctypes.data,
                                               host_split.ctypes.data, capi.error, 1024))
    split_weight = torch.from_numpy(host_split).cuda()
    del host_w, host_split
    ws = torch.empty(max(16, capi.lib.fs_gemm_workspace_bytes(n, f_in, f_out, tf32, algorithm,
                                                                  slices)),
                     dtype=torch.uint8, device="cuda")

    def run(x, out=None):
      y = out if out is not None else torch.empty((n, f_out), device="cuda")
      capi.check(capi.lib.fs_gemm_family(ctypes.c_void_p(handle), n, f_in, f_out, groups, lo, hi,
                                         eps, tf32, algorithm, slices, ptr(x), ptr(m.gemm.weight),
                                         ptr(split_weight), ptr(m.gemm.bias), ptr(m.bias),
                                         ptr(m.groupnorm.weight), ptr(m.groupnorm.bias), ptr(y),
                                         ptr(ws), stream_ptr(), capi.error, 1024))
      return y
    return run
  channels, groups, eps = spec
  n = input_shape[0]
  spatial = math.prod(input_shape[2:])
  ws = torch.empty(max(1, capi.lib.fs_groupnorm_workspace_bytes(n, channels, spatial, groups)),
                   dtype=torch.uint8, device="cuda")
  gn = module.gn
  schedule = GROUPNORM_SCHEDULES[options.get("schedule", "auto")]
  lag = options.get("lag", 0)
  ctas = options.get("ctas", -1)  # -1: the library's default

  def run(x, out=None):
    y = out if out is not None else torch.empty(input_shape, device="cuda")
    capi.check(capi.lib.fs_groupnorm_family(n, channels, spatial, groups, eps, schedule, lag, ctas,
                                            ptr(x), ptr(gn.weight), ptr(gn.bias), ptr(y),
                                            ptr(ws), stream_ptr(), capi.error, 1024))
    return y
  return run


def errors(y, ref):
  """(relative L2, max abs) of y against ref; a NaN anywhere counts as infinitely wrong
  (max() over NaN would otherwise let it pass)."""
  diff = (y.double() - ref)
  rel = (torch.linalg.vector_norm(diff) / torch.linalg.vector_norm(ref)).item()
  mx = diff.abs().max().item()
  if math.isnan(rel) or math.isnan(mx):
    return math.inf, math.inf
  return rel, mx


def time_fn(fn, make_input, flush, trials, warmup):
  start = torch.cuda.Event(enable_timing=True)
  end = torch.cuda.Event(enable_timing=True)
  times = []
  for i in range(warmup + trials):
    x = make_input()
    flush.zero_()
    start.record()
    fn(x)
    end.record()
    end.synchronize()
    if i >= warmup:
      times.append(start.elapsed_time(end))
  return statistics.median(times)


def write_report(out, device, copy_tbps, results):
  """Rewritten after every configuration, so a run cut short keeps its rows."""
  report = {"device": device, "torch": torch.__version__, "copy_tbps": copy_tbps,
            "date": time.strftime("%Y-%m-%d"), "command": " ".join(sys.argv), "results": results}
  os.makedirs(out, exist_ok=True)
  with open(os.path.join(out, "kernel_bench.json"), "w") as f:
    json.dump(report, f, indent=2)


def configurations(quick, conv_gn_sms=(), gn_variants=None):
  """(label, family, constructor args, precision, input shape, flops, bytes, options) rows.

  Rows with options pin one of our algorithms and time only ours: they show
  why the library picks what it picks. conv_gn_sms adds family A rows at the
  largest batch with the concurrent GroupNorm on that many multiprocessors.
  gn_variants, [(schedule, lag in chunks, ctas)], replaces the pinned
  GroupNorm rows of family C around the lagged schedule's defaults."""
  configs = []
  batches = [1, 8] if quick else [1, 8, 32, 128]
  for n in batches:
    spec = (64, 64, 3, 1, 0, 0, 8, 1e-5)
    flops = 2 * n * 64 * 64 * 9 * 256 * 256
    bytes_ = 4 * (n * 64 * 256 * 256 + n * 64 * 258 * 258)
    shape = (n, 64, 256, 256)
    configs.append((f"A conv n={n}", "A", spec, "tf32", shape, flops, bytes_, None))
    # The GroupNorm schedule the library does not pick at this batch.
    if not quick:
      other = "after" if n >= MIN_CONCURRENT_GROUPNORM_BATCH else "concurrent"
      configs.append((f"A conv n={n} gn {other}", "A", spec, "tf32", shape, flops, bytes_,
                      {"schedule": other}))
    if n == batches[-1]:
      for sms in conv_gn_sms:
        configs.append((f"A conv n={n} gn concurrent sms {sms}", "A", spec, "tf32", shape, flops,
                        bytes_, {"schedule": "concurrent", "sms": sms}))
  gemm = (8192, 8192, 256, -1.0, 1.0, 1e-5)
  for n in ([1, 64] if quick else [1, 2, 4, 8, 16, 32, 48, 64, 256, 1024]):
    flops = 2 * n * 8192 * 8192
    bytes_ = 4 * (n * 8192 * 2 + 8192 * 8192)
    if n in (2, 4):  # only the crossover between the two small-batch kernels
      for pinned in ("small", "skinny"):
        configs.append((f"B gemm n={n} fp32 {pinned}", "B", gemm, "fp32", (n, 8192), flops,
                        bytes_, {"algorithm": pinned}))
      continue
    for precision in ("fp32", "tf32"):
      configs.append((f"B gemm n={n} {precision}", "B", gemm, precision, (n, 8192), flops, bytes_,
                      None))
    # What kAuto does not pick around the serving batches: both small-batch
    # kernels up to 8 rows, the skinny kernel against SGEMM up to 64.
    if not quick and n in (1, 8):
      for pinned in ("small", "skinny"):
        configs.append((f"B gemm n={n} fp32 {pinned}", "B", gemm, "fp32", (n, 8192), flops,
                        bytes_, {"algorithm": pinned}))
    if not quick and n in (16, 32, 48, 64):
      configs.append((f"B gemm n={n} fp32 sgemm", "B", gemm, "fp32", (n, 8192), flops, bytes_,
                      {"algorithm": "sgemm"}))
    if not quick and n in (16, 32, 48):  # the skinny kernel takes up to 48 rows
      configs.append((f"B gemm n={n} fp32 skinny", "B", gemm, "fp32", (n, 8192), flops, bytes_,
                      {"algorithm": "skinny"}))
      configs.append((f"B gemm n={n} tf32 skinny", "B", gemm, "tf32", (n, 8192), flops, bytes_,
                      {"algorithm": "skinny"}))
    if not quick and n in (64, 256):
      pinned = {"algorithm": "tf32x3" if n == 64 else "sgemm"}
      configs.append((f"B gemm n={n} fp32 {pinned['algorithm']}", "B", gemm, "fp32", (n, 8192),
                      flops, bytes_, pinned))
    if not quick and n == 1024:
      configs.append((f"B gemm n={n} fp32 sgemm", "B", gemm, "fp32", (n, 8192), flops, bytes_,
                      {"algorithm": "sgemm"}))
      for slices in (1, 4, 16):
        configs.append((f"B gemm n={n} fp32 3xtf32/{slices}", "B", gemm, "fp32", (n, 8192), flops,
                        bytes_, {"algorithm": "tf32x3", "slices": slices}))
  for n in ([1, 16] if quick else [1, 16, 112]):
    spec = (64, 8, 1e-5)
    bytes_ = 4 * 2 * n * 64 * 512 * 512
    configs.append((f"C groupnorm n={n}", "C", spec, "fp32", (n, 64, 512, 512), 0, bytes_, None))
    # Every schedule pinned beside the library's choice (the resident one on
    # an H200, the lagged one on an H100; group_norm.h). One group is 128
    # chunks of 64 KiB; the lagged default lag is 192 with 3 CTAs per SM.
    if not quick:
      for schedule in ("two-read", "lagged", "resident"):
        configs.append((f"C groupnorm n={n} {schedule}", "C", spec, "fp32", (n, 64, 512, 512), 0,
                        bytes_, {"schedule": schedule}))
    if not quick and n >= 16:
      variants = gn_variants if gn_variants is not None else DEFAULT_GN_VARIANTS
      for schedule, chunks, ctas in variants:
        configs.append((f"C groupnorm n={n} {schedule} {chunks} ctas {ctas}", "C", spec, "fp32",
                        (n, 64, 512, 512), 0, bytes_,
                        {"schedule": schedule, "lag": chunks, "ctas": ctas}))
  return configs


def build_module(family, spec):
  if family == "A":
    module = ConvFamily(*spec)
    randomize_affine(module.group_norm)
  elif family == "B":
    module = GemmFamily(*spec)
    randomize_affine(module.groupnorm)
  else:
    module = GroupNormFamily(*spec)
    randomize_affine(module.gn)
  return module.cuda().eval()


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--lib", required=True)
  parser.add_argument("--out", default=os.environ.get("OUT", "."))
  parser.add_argument("--quick", action="store_true")
  parser.add_argument("--no-compile", action="store_true")
  parser.add_argument("--families", default="ABC", help="which families to run, e.g. BC")
  parser.add_argument("--conv-gn-sms", default="",
                      help="comma-separated multiprocessor counts for the concurrent GroupNorm "
                           "of family A, each a row at the largest batch")
  parser.add_argument("--gn-variants", default=None,
                      help="family C's pinned one-read rows instead of the default ones: "
                           "comma-separated schedule:lag:ctas, e.g. lagged:160:0,lagged:224:2")
  args = parser.parse_args()
  conv_gn_sms = [int(v) for v in args.conv_gn_sms.split(",") if v]
  gn_variants = None
  if args.gn_variants is not None:
    gn_variants = []
    for item in args.gn_variants.split(","):
      schedule, chunks, ctas = item.split(":")
      if schedule not in GROUPNORM_SCHEDULES:
        parser.error(f"--gn-variants: unknown schedule {schedule!r}")
      gn_variants.append((schedule, int(chunks), int(ctas)))

  torch.manual_seed(0)
  # Let PyTorch load its CUDA runtime and cuBLAS first; the library then
  # binds to the same copies.
  torch.ones(8, 8, device="cuda") @ torch.ones(8, 8, device="cuda")
  capi = Capi(args.lib)
  device = torch.cuda.get_device_name()
  flush = torch.empty(L2_FLUSH_BYTES // 4, device="cuda")
  # Achievable memory bandwidth on this GPU: a device-to-device copy.
  src = torch.empty(1 << 29, device="cuda")
  dst = torch.empty_like(src)
  copy_ms = time_fn(lambda _: dst.copy_(src), lambda: None, flush, 5, 2)
  copy_tbps = 2 * src.numel() * 4 / copy_ms / 1e9
  del src, dst

  results = []
  for label, family, spec, precision, shape, flops, bytes_, options in configurations(
      args.quick, conv_gn_sms, gn_variants):
    if family not in args.families:
      continue
    torch.cuda.empty_cache()
    row = {"config": label, "family": family, "precision": precision, "shape": list(shape)}
    if options:
      row["pinned"] = options
    try:
      module = build_module(family, spec)
      ours = make_ours(capi, family, module, spec, precision, shape, options)
      # Accuracy on both input distributions (our output poisoned first).
      worst = (0.0, 0.0)
      eager_worst = (0.0, 0.0)
      with torch.no_grad():
        reference = build_module(family, spec).double()
        reference.load_state_dict({k: v.double() for k, v in module.state_dict().items()})
        for dist in ("uniform", "normal"):
          x = torch.rand(shape, device="cuda") if dist == "uniform" else torch.randn(shape,
                                                                                      device="cuda")
          ref = reference(x.double())
          y = torch.full(ref.shape, float("nan"), device="cuda")
          ours(x, y)
          torch.cuda.synchronize()
          rel, mx = errors(y, ref)
          worst = (max(worst[0], rel), max(worst[1], mx))
          erel, emx = errors(module(x), ref)
          eager_worst = (max(eager_worst[0], erel), max(eager_worst[1], emx))
          del ref, y
        del reference
      tol = TOLERANCE[precision]
      row.update(rel_l2=worst[0], max_abs=worst[1], accurate=(worst[0] <= tol[0] and
                                                             worst[1] <= tol[1]),
                 eager_rel_l2=eager_worst[0], eager_max_abs=eager_worst[1])

      big = math.prod(shape) > (1 << 26)
      trials, warmup = (10, 3) if big else (20, 5)
      make_input = lambda: torch.rand(shape, device="cuda")
      with torch.no_grad():
        # PyTorch's own defaults: cuDNN may use TF32 for convolutions, matmul
        # stays float32 unless the family's precision is tf32.
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        row["ours_ms"] = time_fn(ours, make_input, flush, trials, warmup)
        if not options:
          row["eager_ms"] = time_fn(module, make_input, flush, trials, warmup)
        if not args.no_compile and not options:
          compiled = torch.compile(module, dynamic=False)
          t0 = time.time()
          compiled(make_input())
          torch.cuda.synchronize()
          row["compile_seconds"] = time.time() - t0
          row["compile_ms"] = time_fn(compiled, make_input, flush, trials, warmup)
        torch.backends.cuda.matmul.allow_tf32 = False
      if "eager_ms" in row:
        row["speedup_vs_eager"] = row["eager_ms"] / row["ours_ms"]
      if "compile_ms" in row:
        row["speedup_vs_compile"] = row["compile_ms"] / row["ours_ms"]
      row["achieved_tbps"] = bytes_ / row["ours_ms"] / 1e9
      row["memory_floor_ms"] = bytes_ / (copy_tbps * 1e9)
      if flops:
        row["achieved_tflops"] = flops / row["ours_ms"] / 1e9
      del module, ours
    except Exception as e:  # report and go on: one failing family must not hide the others
      row["error"] = f"{type(e).__name__}: {e}"
    results.append(row)
    print(json.dumps(row), flush=True)
    write_report(args.out, device, copy_tbps, results)


  print(f"\n{device}, PyTorch {torch.__version__}, D2D copy {copy_tbps:.2f} TB/s")
  header = (f"{'config':<30}{'ours ms':>9}{'eager ms':>10}{'compile ms':>11}{'x eager':>9}"
            f"{'x compile':>10}{'TB/s':>7}{'TFLOP/s':>9}{'floor ms':>9}{'rel L2':>10}  ok")
  print(header)
  for r in results:
    if "error" in r:
      print(f"{r['config']:<30} ERROR {r['error']}")
      continue
    nan = float("nan")
    print(f"{r['config']:<30}{r['ours_ms']:>9.3f}{r.get('eager_ms', nan):>10.3f}"
          f"{r.get('compile_ms', nan):>11.3f}{r.get('speedup_vs_eager', nan):>9.2f}"
          f"{r.get('speedup_vs_compile', nan):>10.2f}{r['achieved_tbps']:>7.2f}"
          f"{r.get('achieved_tflops', nan):>9.1f}{r['memory_floor_ms']:>9.3f}"
          f"{r['rel_l2']:>10.1e}  {'yes' if r['accurate'] else 'NO'}")
  # Pinned rows show alternatives the library does not pick (one of them is
  # there to show an accuracy failure); only the library's own rows decide.
  return 0 if all(r.get("accurate") for r in results if "pinned" not in r) else 1


if __name__ == "__main__":
  sys.exit(main())
