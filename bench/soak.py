#!/usr/bin/env python3
"""Soak (issue 8 item 6): fuseserve at saturation on all three families at once.

One server, the default repository (GPU instances where a GPU is present); one
`fuseserve-cli bench` per family, each at its saturating concurrency, for the
whole window. Every --sample-s the server's resident set (VmRSS) and device
memory (nvidia-smi's per-process figure, where there is one) are sampled.
Passes when every request was answered (none failed, none lost) and both memory
figures grew less than --max-growth (2%) from the end of the warm-up to the end.
The table is printed last; the JSON (samples, bench reports) goes to --out.

  bench/soak.py --fuseserve BIN --cli BIN --out soak.json [--duration-s 600]
  bench/soak.py ... --quick        # small repository, 20 s: a smoke test
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import serving_bench as sb

# Concurrency that keeps each family's instance busy (serving_bench's high levels).
CONCURRENCY = {"gemm": 64, "conv": 16, "groupnorm": 16}


def resident_bytes(pid):
  with open("/proc/%d/status" % pid) as f:
    for line in f:
      if line.startswith("VmRSS:"):
        return int(line.split()[1]) * 1024
  raise RuntimeError("no VmRSS for pid %d" % pid)


def resident_split(pid):
  """The resident set by kind (/proc/PID/status RssAnon, RssFile, RssShmem), in bytes:
  heap and anonymous mappings, mapped files (libraries, and the driver's page-locked
  mappings of /dev/nvidia*), shared memory."""
  split = {}
  with open("/proc/%d/status" % pid) as f:
    for line in f:
      for key in ("RssAnon", "RssFile", "RssShmem"):
        if line.startswith(key + ":"):
          split[key] = int(line.split()[1]) * 1024
  return split


def resident_by_mapping(pid):
  """Rss per mapping (/proc/PID/smaps), keyed by the mapped path, '[heap]', '[stack]',
  or '[anon]' for anonymous mappings (malloc's large blocks and arenas among them)."""
  by_name, name = {}, None
  with open("/proc/%d/smaps" % pid) as f:
    for line in f:
      fields = line.split()
      if not fields:
        continue
      if not fields[0].endswith(":"):  # a mapping's header line: range perms offset dev inode [path]
        name = fields[5] if len(fields) >= 6 else "[anon]"
      elif fields[0] == "Rss:" and name is not None:
        by_name[name] = by_name.get(name, 0) + int(fields[1]) * 1024
  return by_name


def mapping_growth(before, after, top=12):
  """The mappings whose Rss changed most between two resident_by_mapping samples."""
  names = set(before) | set(after)
  changes = [(name, after.get(name, 0) - before.get(name, 0), after.get(name, 0))
             for name in names]
  changes.sort(key=lambda c: -abs(c[1]))
  return [{"mapping": n, "change_bytes": d, "end_bytes": e} for n, d, e in changes[:top] if d]


def device_bytes(pid):
  """The GPU memory nvidia-smi attributes to `pid`, or None without one."""
  if shutil.which("nvidia-smi") is None:
    return None
  done = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                         "--format=csv,noheader,nounits"], capture_output=True, text=True)
  if done.returncode != 0:
    return None
  total = None
  for line in done.stdout.splitlines():
    fields = [f.strip() for f in line.split(",")]
    if len(fields) == 2 and fields[0] == str(pid):
      total = (total or 0) + int(fields[1]) * (1 << 20)
  return total


def growth(samples, key, since_s):
  """(first value at or after since_s, last value, relative growth), over the
  samples taken while every bench was still running: once one has finished,
  the load is lower and the memory figures would flatter the verdict."""
  values = [s[key] for s in samples
            if s["t_s"] >= since_s and s.get("under_load", True) and s.get(key) is not None]
  if len(values) < 2:
    return None
  return {"after_warmup": values[0], "end": values[-1], "max": max(values),
          "growth": (values[-1] - values[0]) / values[0] if values[0] else None}


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  sb.add_binary_arguments(parser)
  parser.add_argument("--duration-s", type=float, default=None, help="default 600 (quick 20)")
  parser.add_argument("--warmup-s", type=float, default=None,
                      help="excluded from the memory check; default 60 (quick 5)")
  parser.add_argument("--sample-s", type=float, default=None, help="default 10 (quick 1)")
  parser.add_argument("--max-growth", type=float, default=0.02)
  parser.add_argument("--channels", type=int, default=4)
  parser.add_argument("--quick", action="store_true")
  parser.add_argument("--server-env", action="append", default=[], metavar="KEY=VALUE",
                      help="set in fuseserve's environment only (e.g. MALLOC_ARENA_MAX=2, or "
                           "LD_PRELOAD of another allocator); repeatable")
  args = parser.parse_args(argv)
  args.duration_s = args.duration_s or (20.0 if args.quick else 600.0)
  args.warmup_s = args.warmup_s if args.warmup_s is not None else (5.0 if args.quick else 60.0)
  args.sample_s = args.sample_s or (1.0 if args.quick else 10.0)
  args.logs = args.logs or os.path.splitext(args.out)[0] + ".logs"
  # What serving_bench's repository and plan helpers read besides.
  args.repository = ""
  args.compare_one_gpu = False
  return args


def run(args):
  os.makedirs(args.logs, exist_ok=True)
  cli = sb.Cli(args.cli, sb.native_env(args.ld_library_path))
  work_dir = tempfile.mkdtemp(prefix="soak_")
  try:
    repository, by_family, _ = sb.prepare_repository(args, cli, work_dir)
    server_env = dict(cli.env)
    for setting in args.server_env:
      key, _, value = setting.partition("=")
      server_env[key] = value
    server = sb.ServerProcess(
        sb.FUSESERVE, os.path.join(args.logs, sb.FUSESERVE),
        lambda port_file: [args.fuseserve, "--model-repository=" + repository, "--grpc-port=0",
                           "--metrics-port=0", "--port-file=" + port_file], server_env)
    url = "127.0.0.1:%d" % server.start()
    try:
      models = {c.label: by_family[c.family] for c in sb.CONFIGURATIONS}
      plans = sb.plan_configurations(args, repository, by_family)
      server.wait_ready(cli, url, list(models.values()))
      spatial = sb.QUICK_SPATIAL if args.quick else sb.SPATIAL
      benches, reports = [], {}
      bench_args = argparse.Namespace(warmup_s=0.0, duration_s=args.duration_s,
                                      channels=args.channels)
      for key, model in models.items():
        plan = plans[key]
        shape = plan["shape"] if plan["variable"] else None
        stem = os.path.join(args.logs, "soak-%s" % key)

        def one(key=key, model=model, shape=shape, stem=stem):
          try:
            reports[key] = sb.bench(cli, url, model, shape, [CONCURRENCY[key]], bench_args,
                                    stem + ".json", stem + ".txt")
          except sb.BenchError as e:
            reports[key] = {"error": str(e)}
        benches.append(threading.Thread(target=one))
      sb.log("soak: %s for %.0f s (spatial %d)" % (
          ", ".join("%s c%d" % (k, CONCURRENCY[k]) for k in models), args.duration_s, spatial))
      start = time.monotonic()
      for thread in benches:
        thread.start()
      samples = []
      # Rss per mapping at the end of the warm-up and at the last sample: where
      # any growth of the resident set lives.
      mappings = {}
      while any(thread.is_alive() for thread in benches):
        pid = server.process.pid
        t_s = round(time.monotonic() - start, 1)
        samples.append(dict({"t_s": t_s,
                             "under_load": all(thread.is_alive() for thread in benches),
                             "rss_bytes": resident_bytes(pid),
                             "device_bytes": device_bytes(pid)}, **resident_split(pid)))
        if t_s >= args.warmup_s and "after_warmup" not in mappings:
          mappings["after_warmup"] = resident_by_mapping(pid)
        last = samples[-1]
        if last["under_load"]:
          mappings["end"] = resident_by_mapping(pid)
        sb.log("  t=%5.0f s  rss %.1f MiB (anon %.1f, file %.1f, shmem %.1f)  device %s" % (
            last["t_s"], last["rss_bytes"] / 2**20, last.get("RssAnon", 0) / 2**20,
            last.get("RssFile", 0) / 2**20, last.get("RssShmem", 0) / 2**20,
            "n/a" if last["device_bytes"] is None else "%.1f MiB" % (last["device_bytes"] / 2**20)))
        for thread in benches:
          thread.join(timeout=args.sample_s / len(benches))
    finally:
      exit_code = server.stop()
  finally:
    shutil.rmtree(work_dir, ignore_errors=True)

  rows, ok = [], exit_code == 0
  for key, report in sorted(reports.items()):
    if "error" in report:
      rows.append((key, "bench error", report["error"][:200]))
      ok = False
      continue
    level = report["levels"][0]
    failed, lost = level["requests"]["failed"], level["requests"]["lost"]
    ok = ok and failed == 0 and lost == 0
    rows.append((key, "c%d: %d requests, %.1f infer/s, p99 %.2f ms" % (
        level["concurrency"], level["requests"].get("succeeded", 0),
        level["throughput"]["inferences_per_s"], level["latency_us"]["p99"] / 1e3),
                 "failed %d, lost %d" % (failed, lost)))
  memory = {key: growth(samples, key, args.warmup_s) for key in ("rss_bytes", "device_bytes")}
  # Where the resident set went (reported, not judged).
  split = {key: growth(samples, key, args.warmup_s) for key in ("RssAnon", "RssFile", "RssShmem")}
  moved = (mapping_growth(mappings["after_warmup"], mappings["end"])
           if "after_warmup" in mappings else [])
  for key, g in memory.items():
    if g is None:
      rows.append((key, "not sampled", ""))
      continue
    ok = ok and g["growth"] is not None and g["growth"] < args.max_growth
    rows.append((key, "%.1f -> %.1f MiB (max %.1f)" % (
        g["after_warmup"] / 2**20, g["end"] / 2**20, g["max"] / 2**20),
                 "growth %+.2f%% (limit %.0f%%)" % (100 * g["growth"], 100 * args.max_growth)))
  for key, g in split.items():
    if g is not None:
      rows.append(("  " + key, "%.1f -> %.1f MiB" % (g["after_warmup"] / 2**20, g["end"] / 2**20),
                   "%+.1f MiB" % ((g["end"] - g["after_warmup"]) / 2**20)))
  for change in moved[:5]:
    rows.append(("  mapping", change["mapping"][-58:], "%+.1f MiB (now %.1f)" % (
        change["change_bytes"] / 2**20, change["end_bytes"] / 2**20)))
  rows.append(("server exit", "code %s on SIGTERM" % exit_code, ""))
  with open(args.out, "w") as f:
    json.dump({"settings": {"duration_s": args.duration_s, "warmup_s": args.warmup_s,
                            "sample_s": args.sample_s, "concurrency": CONCURRENCY,
                            "quick": args.quick, "server_env": args.server_env},
               "samples": samples, "memory": memory, "resident_split": split,
               "mapping_growth": moved, "reports": reports, "exit_code": exit_code,
               "passed": ok}, f, indent=1)
  for row in rows:
    print("%-14s %-58s %s" % row)
  print("soak: %s (results: %s)" % ("PASSED" if ok else "FAILED", args.out))
  return 0 if ok else 1


def main(argv):
  args = parse_args(argv)
  try:
    return run(args)
  except sb.BenchError as e:
    print("soak: %s" % e, file=sys.stderr)
    return 1


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
