#!/usr/bin/env python3
"""Where the host's CPU goes while fuseserve serves one model (issue 6).

One server on the default repository (plus the GEMM model's no-batching
variant, as bench/serving_bench.py makes it); for each requested run, one
`fuseserve-cli bench` at one concurrency. Over the middle of its measured
window, every thread's CPU time (utime + stime of /proc/PID/task/TID/stat) is
read in the server and in the client, and the host's busy time (/proc/stat).
Printed: CPU microseconds per inference of each process, split by thread name
(gRPC names its threads; fuseserve's own inherit the process name), and the
host's busy cores; and, from the server's Prometheus latency histograms over
the run (warm-up included), where its requests' time went at the tail, to
tell a tail made inside the server from one made by the transport or the
client. JSON with every figure goes to --out.

  bench/cpu_split.py --fuseserve BIN --cli BIN --out cpu.json \
      --run gemm:64 --run gemm_nobatch:64 [--duration-s 8 --warmup-s 3] \
      [--server-arg=--response-threads=2 ...]
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

import serving_bench as sb

TICKS_PER_S = os.sysconf("SC_CLK_TCK")
# The window is the bench's measured window less this margin at each end.
EDGE_S = 0.5


def thread_times(pid):
  """{thread id: (name, CPU seconds)} over the threads of `pid`, names with
  their trailing digits removed, so that a pool's threads share one."""
  times = {}
  task_dir = "/proc/%d/task" % pid
  for tid in os.listdir(task_dir):
    try:
      with open(os.path.join(task_dir, tid, "stat")) as f:
        stat = f.read()
    except OSError:  # the thread ended between listdir and open
      continue
    # comm is in parentheses and may hold spaces; the fields after it are fixed.
    name = stat[stat.index("(") + 1:stat.rindex(")")]
    fields = stat[stat.rindex(")") + 2:].split()
    seconds = (int(fields[11]) + int(fields[12])) / TICKS_PER_S  # utime, stime
    times[tid] = (re.sub(r"[-_.:0-9]+$", "", name) or name, seconds)
  return times


def minor_faults(pid):
  """Minor page faults of process `pid` so far (/proc/PID/stat field 10): a
  page the process touches first after glibc returned it to the system (or
  after a fresh mapping) costs one, and its zeroing."""
  with open("/proc/%d/stat" % pid) as f:
    stat = f.read()
  return int(stat[stat.rindex(")") + 2:].split()[7])


def host_busy_s():
  """(busy CPU seconds, all CPU seconds) of the whole host since boot."""
  with open("/proc/stat") as f:
    fields = [int(v) for v in f.readline().split()[1:]]
  idle = fields[3] + fields[4]  # idle, iowait
  total = sum(fields[:8])       # user .. steal (guest time is inside user)
  return (total - idle) / TICKS_PER_S, total / TICKS_PER_S


def snapshot(server_pid, client_pid):
  return {"time": time.monotonic(), "server": thread_times(server_pid),
          "client": thread_times(client_pid), "host": host_busy_s(),
          "faults": {"server": minor_faults(server_pid), "client": minor_faults(client_pid)}}


def by_name(before, after, window_s, inferences):
  """{thread name: {us_per_inference, threads, busiest_core}} between two
  thread_times samples; busiest_core is the share of one core that the
  busiest thread of that name used (near 1: that thread is a serial limit)."""
  names = {}
  for tid, (name, seconds) in after.items():
    used = seconds - before.get(tid, (name, 0.0))[1]
    entry = names.setdefault(name, {"seconds": 0.0, "threads": 0, "busiest_core": 0.0})
    entry["seconds"] += used
    entry["threads"] += 1
    entry["busiest_core"] = max(entry["busiest_core"], used / window_s)
  return {n: {"us_per_inference": 1e6 * e["seconds"] / inferences, "threads": e["threads"],
              "busiest_core": e["busiest_core"]}
          for n, e in sorted(names.items(), key=lambda item: -item[1]["seconds"])
          if e["seconds"] > 0}


def measure_run(cli, url, model, concurrency, args, stem, extra=()):
  """One bench run sampled in the middle of its window: the split. extra:
  more bench flags."""
  command = cli.command("bench", model, "--url", url, "--concurrency", str(concurrency),
                        "--warmup-s", str(args.warmup_s), "--duration-s", str(args.duration_s),
                        "--channels", str(args.channels), "--json", stem + ".json", "--quiet",
                        *args.client_arg, *extra)
  histograms_before = scrape_histograms(args.metrics_port, model)
  with open(stem + ".txt", "w") as out:
    client = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=cli.env)
    try:
      time.sleep(args.warmup_s + EDGE_S)
      first = snapshot(args.server_pid, client.pid)
      time.sleep(args.duration_s - 2 * EDGE_S)
      last = snapshot(args.server_pid, client.pid)
    finally:
      code = client.wait()
  histograms = histogram_delta(histograms_before, scrape_histograms(args.metrics_port, model))
  if code != 0:
    with open(stem + ".txt", errors="replace") as f:
      raise sb.BenchError("%s failed (exit %d):\n%s" % (" ".join(command), code, f.read()[-4000:]))
  with open(stem + ".json") as f:
    level = json.load(f)["levels"][0]
  window_s = last["time"] - first["time"]
  rate = level["throughput"]["inferences_per_s"]
  inferences = rate * window_s
  result = {"model": model, "concurrency": concurrency, "window_s": window_s,
            "inferences_per_s": rate, "failed": level["requests"]["failed"],
            "avg_batch_size": level["server"].get("avg_batch_size"),
            "host_busy_cores": (last["host"][0] - first["host"][0]) / window_s,
            "host_cores": (last["host"][1] - first["host"][1]) / window_s,
            "latency_us": level["latency_us"], "server_histograms": histograms}
  if level["server"].get("available"):
    # The server's own decomposition of a request (Triton's: queue, compute
    # input, compute infer, compute output; the rest is the server's overhead).
    result["server_phases_us"] = {
        k: level["server"]["avg_%s_us" % k]
        for k in ("request", "queue", "compute_input", "compute_infer", "compute_output")}
  for side in ("server", "client"):
    threads = by_name(first[side], last[side], window_s, inferences)
    us = sum(t["us_per_inference"] for t in threads.values())
    result[side] = {"cores": us * inferences / 1e6 / window_s, "us_per_inference": us,
                    "minor_faults_per_inference":
                        (last["faults"][side] - first["faults"][side]) / inferences,
                    "threads": threads}
  return result


# The server's latency histograms (SPEC: nv_inference_*_duration_histogram_us).
HISTOGRAMS = ("request", "queue", "compute_infer")
BUCKET_LINE = re.compile(
    r'^nv_inference_(\w+)_duration_histogram_us_bucket\{(.*)\} ([0-9.eE+-]+)$')


def scrape_histograms(metrics_port, model):
  """{phase: [(upper bound us, cumulative count)]} of `model`'s latency
  histograms on the server's /metrics, bounds ascending (+Inf last)."""
  url = "http://127.0.0.1:%d/metrics" % metrics_port
  with urllib.request.urlopen(url, timeout=10) as response:
    text = response.read().decode()
  found = {}
  for line in text.splitlines():
    match = BUCKET_LINE.match(line)
    if not match or match.group(1) not in HISTOGRAMS:
      continue
    labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2)))
    if labels.get("model") != model:
      continue
    bound = float("inf") if labels["le"] == "+Inf" else float(labels["le"])
    found.setdefault(match.group(1), []).append((bound, float(match.group(3))))
  return {phase: sorted(buckets) for phase, buckets in found.items()}


def histogram_delta(before, after):
  """{phase: {"count", "buckets": [[bound, count in (previous, bound]]],
  "p50_le_us", "p90_le_us", "p99_le_us"}}: the requests between two
  scrapes; a percentile is the bound of the bucket that holds it."""
  result = {}
  for phase, buckets in after.items():
    earlier = dict(before.get(phase, []))
    cumulative = [(bound, count - earlier.get(bound, 0.0)) for bound, count in buckets]
    total = cumulative[-1][1] if cumulative else 0.0
    entry = {"count": total, "buckets": []}
    previous = 0.0
    for bound, count in cumulative:
      entry["buckets"].append([bound, count - previous])
      previous = count
    for q in (50, 90, 99):
      entry["p%d_le_us" % q] = next(
          (bound for bound, count in cumulative if total > 0 and count >= total * q / 100),
          None)
    result[phase] = entry
  return result


def format_histograms(histograms):
  parts = []
  for phase in HISTOGRAMS:
    h = histograms.get(phase)
    if not h or not h["count"]:
      continue
    above = sum(c for bound, c in h["buckets"] if bound > 500)
    parts.append("%s p50/p90/p99 <= %s/%s/%s us, %.2f%% over 500 us" % (
        phase, h["p50_le_us"], h["p90_le_us"], h["p99_le_us"], 100 * above / h["count"]))
  return "  server histograms: " + "; ".join(parts)


def format_result(r):
  lines = ["%s c%d: %.0f infer/s (batch %.1f, %d failed); host %.1f of %.0f cores busy" % (
      r["model"], r["concurrency"], r["inferences_per_s"], r["avg_batch_size"] or 0, r["failed"],
      r["host_busy_cores"], r["host_cores"])]
  for side in ("server", "client"):
    s = r[side]
    top = ", ".join("%s x%d %.1f (busiest %.0f%%)" % (n, t["threads"], t["us_per_inference"],
                                                      100 * t["busiest_core"])
                    for n, t in list(s["threads"].items())[:5])
    lines.append("  %-6s %.1f cores, %.1f us/inference, %.2f page faults/inference: %s" % (
        side, s["cores"], s["us_per_inference"], s["minor_faults_per_inference"], top))
  latency = r["latency_us"]
  lines.append("  client latency p50/p90/p99 %.0f/%.0f/%.0f us, max %.0f" % (
      latency["p50"], latency["p90"], latency["p99"], latency["max"]))
  if r.get("server_histograms"):
    lines.append(format_histograms(r["server_histograms"]))
  return "\n".join(lines)


def reconfigure(repository, instances, queue_delay_us, busy_wait_events=None):
  """Sets the instance count, the batching delay and how GPU instances wait
  for a batch (optimization.cuda.busy_wait_events) of every model in
  `repository` (0 / -1 / None: left as they are)."""
  for name in sorted(os.listdir(repository)):
    path = os.path.join(repository, name, "config.pbtxt")
    if not os.path.isfile(path):
      continue
    config = sb.read_config(os.path.join(repository, name))
    if instances > 0:
      for group in config.instance_group:
        group.count = instances
    if queue_delay_us >= 0 and config.HasField("dynamic_batching"):
      config.dynamic_batching.max_queue_delay_microseconds = queue_delay_us
    if busy_wait_events is not None:
      config.optimization.cuda.busy_wait_events = busy_wait_events
    with open(path, "w") as f:
      f.write(sb.text_format.MessageToString(config))


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  sb.add_binary_arguments(parser)
  parser.add_argument("--run", action="append", required=True,
                      help="LABEL:CONCURRENCY, LABEL a family (gemm, conv, groupnorm) or "
                           "gemm_nobatch; repeatable")
  parser.add_argument("--warmup-s", type=float, default=3.0)
  parser.add_argument("--duration-s", type=float, default=8.0)
  parser.add_argument("--channels", type=int, default=sb.DEFAULT_CHANNELS)
  parser.add_argument("--quick", action="store_true", help="the small repository")
  parser.add_argument("--instances", type=int, default=0,
                      help="instance_group count of every model (default: the repository's)")
  parser.add_argument("--shared-memory", action="store_true",
                      help="pass tensors through Triton's system shared memory (bench "
                           "--shared-memory system) instead of the gRPC messages")
  parser.add_argument("--server-arg", action="append", default=[],
                      help="one more fuseserve flag, e.g. --server-arg=--response-threads=2; "
                           "repeatable")
  parser.add_argument("--client-arg", action="append", default=[],
                      help="one more fuseserve-cli bench flag, e.g. "
                           "--client-arg=--typed-serialization; repeatable")
  parser.add_argument("--queue-delay-us", type=int, default=-1,
                      help="max_queue_delay_microseconds of every batching model "
                           "(default: the repository's)")
  parser.add_argument("--busy-wait-events", choices=("on", "off"), default=None,
                      help="GPU instances spin on their batches' events (on) or block in "
                           "the driver (off); default: the repository's")
  args = parser.parse_args(argv)
  if args.duration_s <= 2 * EDGE_S + 1:
    parser.error("--duration-s must exceed %.0f s" % (2 * EDGE_S + 1))
  args.logs = args.logs or os.path.splitext(args.out)[0] + ".logs"
  args.runs = []
  for spec in args.run:
    label, _, concurrency = spec.partition(":")
    if not concurrency.isdigit() or int(concurrency) < 1:
      parser.error("--run %s: expected LABEL:CONCURRENCY" % spec)
    args.runs.append((label, int(concurrency)))
  args.repository = ""  # what serving_bench's repository helper reads
  args.compare_one_gpu = False  # and its configuration planner
  return args


def run(args):
  os.makedirs(args.logs, exist_ok=True)
  cli = sb.Cli(args.cli, sb.native_env(args.ld_library_path))
  work_dir = tempfile.mkdtemp(prefix="cpu_split_")
  results = []
  try:
    repository, by_family, nobatch = sb.prepare_repository(args, cli, work_dir)
    reconfigure(repository, args.instances, args.queue_delay_us,
                None if args.busy_wait_events is None else args.busy_wait_events == "on")
    models = {c.label: by_family[c.family] for c in sb.CONFIGURATIONS}
    models["gemm_nobatch"] = nobatch
    plans = sb.plan_configurations(args, repository, by_family)
    plans["gemm_nobatch"] = plans["gemm"]
    unknown = [label for label, _ in args.runs if label not in models]
    if unknown:
      raise sb.BenchError("unknown --run label(s) %s; known: %s" % (
          ", ".join(unknown), ", ".join(sorted(models))))
    server = sb.ServerProcess(
        sb.FUSESERVE, os.path.join(args.logs, sb.FUSESERVE),
        lambda port_file: [args.fuseserve, "--model-repository=" + repository, "--grpc-port=0",
                           "--metrics-port=0", "--allow-shared-memory=true",
                           "--port-file=" + port_file] + args.server_arg, cli.env)
    url = "127.0.0.1:%d" % server.start()
    args.server_pid = server.process.pid
    args.metrics_port = server.metrics_port
    try:
      server.wait_ready(cli, url, sorted({models[label] for label, _ in args.runs}))
      for label, concurrency in args.runs:
        stem = os.path.join(args.logs, "%s-c%d%s" % (label, concurrency,
                                                     "-shm" if args.shared_memory else ""))
        # Output regions are sized for one request's output.
        plan = plans[label]
        extra = (("--shared-memory", "system", "--output-shared-memory-size",
                  str(plan["output_bytes"])) if args.shared_memory else ())
        # --shape only where the config has -1 dims (groupnorm), as serving_bench.
        if plan["variable"]:
          extra += ("--shape", ",".join(str(d) for d in plan["shape"]))
        results.append(measure_run(cli, url, models[label], concurrency, args, stem, extra))
        print(format_result(results[-1]), flush=True)
    finally:
      exit_code = server.stop()
  finally:
    shutil.rmtree(work_dir, ignore_errors=True)
  with open(args.out, "w") as f:
    json.dump({"settings": {"warmup_s": args.warmup_s, "duration_s": args.duration_s,
                            "channels": args.channels, "quick": args.quick,
                            "tensors": ("system shared memory" if args.shared_memory
                                        else "gRPC messages"),
                            "instances": args.instances or "repository's",
                            "queue_delay_us": (args.queue_delay_us if args.queue_delay_us >= 0
                                               else "repository's"),
                            "busy_wait_events": args.busy_wait_events or "repository's",
                            "server_args": args.server_arg,
                            "host_cpus": os.cpu_count()},
               "runs": results, "server_exit_code": exit_code}, f, indent=1)
  print("results: %s" % args.out)
  return 0 if exit_code == 0 and all(r["failed"] == 0 for r in results) else 1


def main(argv):
  try:
    return run(parse_args(argv))
  except sb.BenchError as e:
    print("cpu_split: %s" % e, file=sys.stderr)
    return 1


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
