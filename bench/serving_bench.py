#!/usr/bin/env python3
"""fuseserve against the peer (bench/peer_server.py: grpcio + PyTorch eager,
no batching), and against itself with batching off, at the same settings.

1. The model repository: the default one (`fuseserve-cli make-repository`,
   --small under --quick) or a linked copy of --repository; plus
   <gemm model>_nobatch, the same weights with max_batch_size 0 and no
   dynamic_batching (every request runs alone; input dims [1, F_in]).
2. fuseserve serves it, and `fuseserve-cli bench` measures every
   configuration below, one fixed window per concurrency level after a
   warm-up; then the same for the peer on the same repository (its worker
   threads = the highest concurrency measured; cudnn.benchmark on, since
   every request of a run has one shape). The servers run one after the
   other, never side by side; one that cannot be measured (e.g. a peer
   interpreter without grpcio) is reported and the other is still measured.
3. A table (throughput, p50, p99, failures per server and level) and the
   targets of issue 6 are printed last; --out gets all of it as JSON, with
   each `bench` report unabridged.

Configurations (1-row requests; concurrency low,high; --quick: small shapes,
short windows, lower concurrency):
  gemm       1 x F_in                        at 1 and 64   (+ fuseserve no batching)
  conv       1 x C x H x W                   at 1 and 16
  groupnorm  1 x C x 512 x 512 (-1 dims)     at 1 and 16
Targets (issue 6): gemm at the high level >= 10x the peer's throughput and
>= 5x fuseserve without batching; gemm at concurrency 1: fuseserve's p99
below the peer's p50; conv and groupnorm at the high level >= 2x the peer's
throughput. They are reported, not enforced: the exit code is 0 when every
run completed with no failed or lost request, 1 otherwise, 2 on bad usage.

Usage:
  serving_bench.py --fuseserve BIN --cli BIN --out FILE [--quick]
      [--repository DIR] [--logs DIR] [--peer-python PY] [--peer-server threads|aio]
      [--peer-device auto|cuda|cpu] [--ld-library-path PATHS]
      [--warmup-s S] [--duration-s S] [--channels N]

--ld-library-path is prepended to LD_LIBRARY_PATH for fuseserve and the CLI
only (a GPU host's packaged libraries must not shadow PyTorch's). The peer
gets FUSESERVE_PY_STUBS from this environment, as the Python suites do.
"""

import argparse
import atexit
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True

# The client's gRPC channels, each its own HTTP/2 connection: at concurrency 64,
# 16 connections (4 calls each) against 4 gave the batched GEMM +15% and
# batching off +3% on an H100 host, where a connection's frames are handled one
# at a time (bench/results/2026-11-26-h100-gemm-c64-channels.md).
DEFAULT_CHANNELS = 16

_THIS_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(_THIS_DIR, "..", "tests", "python"))

import fuseserve_testing as ft  # noqa: E402  (model_config stubs)
from google.protobuf import text_format  # noqa: E402

PEER_SERVER = os.path.join(_THIS_DIR, "peer_server.py")
STARTUP_TIMEOUT_S = 600
# Both servers write their port file once every model has loaded, so
# readiness follows at once; a model that failed to load never gets ready.
READY_TIMEOUT_S = 30

FUSESERVE = "fuseserve"
NOBATCH = "fuseserve_nobatch"
SHM = "fuseserve_shm"
SHM_ONE_GPU = "fuseserve_shm_1gpu"
PEER = "peer"
SERVER_LABELS = {FUSESERVE: "fuseserve", NOBATCH: "fuseserve, no batching",
                 SHM: "fuseserve, system shm", SHM_ONE_GPU: "fuseserve, system shm, 1 GPU",
                 PEER: "peer (PyTorch eager)"}
SERVER_ORDER = (FUSESERVE, NOBATCH, SHM, SHM_ONE_GPU, PEER)
# Families whose requests are large enough for shared memory to matter: they
# are also measured with tensors in system shared memory.
SHM_CONFIGURATIONS = ("conv", "groupnorm")
# Families whose server-side overhead must stay under this share of the end
# to end latency at concurrency 1 (issue 6).
OVERHEAD_CONFIGURATIONS = ("conv", "groupnorm")
MAX_OVERHEAD_SHARE = 0.25


# One family's requests and its (low, high) concurrency levels.
Configuration = collections.namedtuple("Configuration", "label family levels quick_levels")

CONFIGURATIONS = [
    Configuration("gemm", ft.FAMILY_GEMM, (1, 64), (1, 4)),
    Configuration("conv", ft.FAMILY_CONV, (1, 16), (1, 2)),
    Configuration("groupnorm", ft.FAMILY_GROUPNORM, (1, 16), (1, 2)),
]
# Size of every -1 (spatial) dim of a request.
SPATIAL, QUICK_SPATIAL = 512, 16

# (configuration, level index: 0 low / 1 high, kind, server, other, factor):
#   "throughput": server's infer/s >= factor x other's;
#   "latency":    server's p99 < other's p50.
TARGETS = [
    ("gemm", 1, "throughput", FUSESERVE, PEER, 10.0),
    ("gemm", 1, "throughput", FUSESERVE, NOBATCH, 5.0),
    ("gemm", 0, "latency", FUSESERVE, PEER, None),
    ("conv", 1, "throughput", FUSESERVE, PEER, 2.0),
    ("groupnorm", 1, "throughput", FUSESERVE, PEER, 2.0),
    ("conv", 1, "throughput", SHM, FUSESERVE, 2.0),
    ("groupnorm", 1, "throughput", SHM, FUSESERVE, 2.0),
    # Only on a host with two or more GPUs (--compare-one-gpu), at the
    # scaling level (--scaling-concurrency): enough requests in flight to
    # keep every GPU busy.
    ("conv", "scaling", "throughput", SHM, SHM_ONE_GPU, 1.7),
]


def log(message):
  print("== " + message, file=sys.stderr, flush=True)


class BenchError(Exception):
  """A run that could not be made; the message says why."""


# --------------------------------------------------------------------------
# Servers.

class ServerProcess(ft.ServerProcess):
  """A server whose command writes {"grpc_port": P} to a port file once it
  listens (fuseserve and the peer, both with --port-file). Its stdout and
  stderr, and the port file, are in `log_dir`; stop() (SIGTERM, then the
  exit code), kill() and output() are fuseserve_testing's.

  command: the port file's path -> the argv to run.
  """

  def __init__(self, name, log_dir, command, env=None):
    os.makedirs(log_dir, exist_ok=True)
    super().__init__(repository=None, work_dir=log_dir)
    self.name = name
    self.command = command(self.port_file)
    self.env = env

  def _fail(self, what):
    self.kill()
    raise BenchError("%s %s\ncommand: %s\n%s" % (self.name, what, " ".join(self.command),
                                                 self.output()))

  def start(self, timeout_s=STARTUP_TIMEOUT_S):
    """The port, once the port file names it."""
    if os.path.exists(self.port_file):
      os.remove(self.port_file)
    with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
      self.process = subprocess.Popen(self.command, stdout=out, stderr=err,
                                      stdin=subprocess.DEVNULL, env=self.env)
    atexit.register(self.kill)
    deadline = time.monotonic() + timeout_s
    while True:
      if self.process.poll() is not None:
        self._fail("exited with code %d before listening" % self.process.returncode)
      if time.monotonic() > deadline:
        self._fail("wrote no port file within %d s" % timeout_s)
      try:
        with open(self.port_file) as f:
          ports = json.load(f)
        self.grpc_port = int(ports["grpc_port"])
        # fuseserve's, not the peer's (which serves no metrics).
        self.metrics_port = int(ports.get("metrics_port", 0))
        if self.grpc_port > 0:
          return self.grpc_port
      except (OSError, ValueError, KeyError, TypeError):
        pass
      time.sleep(0.1)

  def wait_ready(self, cli, url, models, timeout_s=READY_TIMEOUT_S):
    """Polls `cli health` until the server and every model are ready."""
    command = cli.command("--url", url, "health", *[a for m in models for a in ("--model", m)])
    deadline = time.monotonic() + timeout_s
    while True:
      done = subprocess.run(command, capture_output=True, text=True, env=cli.env)
      if done.returncode == 0:
        return
      if self.process.poll() is not None:
        self._fail("exited with code %d while loading" % self.process.returncode)
      if time.monotonic() > deadline:
        self._fail("not ready within %d s:\n%s%s" % (timeout_s, done.stdout, done.stderr))
      time.sleep(0.2)


class Cli:
  """fuseserve-cli with its environment."""

  def __init__(self, path, env):
    self.path = path
    self.env = env

  def command(self, *args):
    return [self.path] + list(args)

  def run(self, *args):
    done = subprocess.run(self.command(*args), capture_output=True, text=True, env=self.env)
    if done.returncode != 0:
      raise BenchError("%s failed (exit %d):\n%s%s" % (" ".join(self.command(*args)),
                                                       done.returncode, done.stdout, done.stderr))
    return done.stdout


# --------------------------------------------------------------------------
# The repository.

def _link_weights(source, destination):
  """copytree's copy_function: weight files hard-linked where the file
  system allows (the GEMM model's are 256 MiB), everything else copied so
  that editing a copy never edits the original."""
  if source.endswith(".safetensors"):
    try:
      os.link(source, destination)
      return
    except OSError:
      pass
  shutil.copy2(source, destination)


def read_config(model_dir):
  config = ft.protos().config.ModelConfig()
  with open(os.path.join(model_dir, "config.pbtxt")) as f:
    text_format.Parse(f.read(), config)
  return config


def add_nobatch_variant(repository, model):
  """<model>_nobatch: the weights of `model`, max_batch_size 0, no
  dynamic_batching, input and output dims with a leading 1."""
  source = os.path.join(repository, model)
  name = model + "_nobatch"
  config = read_config(source)
  if config.max_batch_size <= 0:
    raise BenchError("model %s does not batch (max_batch_size %d); no variant to derive" %
                     (model, config.max_batch_size))
  config.name = name
  config.max_batch_size = 0
  config.ClearField("dynamic_batching")
  for tensor in list(config.input) + list(config.output):
    dims = [1] + list(tensor.dims)
    del tensor.dims[:]
    tensor.dims.extend(dims)
  shutil.copytree(source, os.path.join(repository, name), copy_function=_link_weights)
  with open(os.path.join(repository, name, "config.pbtxt"), "w") as f:
    f.write(text_format.MessageToString(config))
  return name


def prepare_repository(args, cli, work_dir):
  """(repository path, {family: model name}, gemm no-batching model name)."""
  repository = os.path.join(work_dir, "models")
  if args.repository:
    shutil.copytree(args.repository, repository, copy_function=_link_weights)
  else:
    cli.run("make-repository", repository, *(["--small"] if args.quick else []))
  by_family = {}
  for name in sorted(os.listdir(repository)):
    if os.path.isfile(os.path.join(repository, name, "config.pbtxt")):
      by_family.setdefault(read_config(os.path.join(repository, name)).platform, name)
  missing = [c.family for c in CONFIGURATIONS if c.family not in by_family]
  if missing:
    raise BenchError("the repository has no model of platform %s" % ", ".join(missing))
  nobatch = add_nobatch_variant(repository, by_family[ft.FAMILY_GEMM])
  return repository, by_family, nobatch


# --------------------------------------------------------------------------
# Measuring.

def bench(cli, url, model, shape, levels, args, json_path, text_path, extra=()):
  """One `fuseserve-cli bench` run over `levels` (plus `extra` flags); its
  JSON report."""
  command = cli.command("bench", model, "--url", url, *extra,
                        "--concurrency", ",".join(str(c) for c in levels),
                        "--warmup-s", str(args.warmup_s), "--duration-s", str(args.duration_s),
                        "--channels", str(args.channels), "--json", json_path,
                        "--quiet", "--allow-errors")
  if shape is not None:
    command += ["--shape", ",".join(str(d) for d in shape)]
  with open(text_path, "w") as out:
    done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=cli.env)
  if done.returncode != 0 or not os.path.isfile(json_path):
    with open(text_path, errors="replace") as f:
      raise BenchError("%s failed (exit %d):\n%s" % (" ".join(command), done.returncode,
                                                     f.read()[-4000:]))
  with open(json_path) as f:
    return json.load(f)


def level_summary(report, concurrency):
  for level in report["levels"]:
    if level["concurrency"] == concurrency:
      server = level["server"]
      summary = {"inferences_per_s": level["throughput"]["inferences_per_s"],
                 "p50_ms": level["latency_us"]["p50"] / 1e3,
                 "p99_ms": level["latency_us"]["p99"] / 1e3,
                 "avg_ms": level["latency_us"]["avg"] / 1e3,
                 "failed": level["requests"]["failed"],
                 "lost": level["requests"]["lost"],
                 "avg_batch_size": server["avg_batch_size"],
                 "executions": server["executions"],
                 "inferences": server["inferences"],
                 "server_statistics": server["available"]}
      if server["available"]:
        # The server's own window per request (decoded -> answered: gRPC's
        # parsing and serialisation of the messages are outside it) minus the
        # GPU's compute, against the client's mean end-to-end latency.
        overhead_us = server["avg_request_us"] - server["avg_compute_infer_us"]
        summary["server_request_ms"] = server["avg_request_us"] / 1e3
        summary["compute_ms"] = server["avg_compute_infer_us"] / 1e3
        summary["server_overhead_ms"] = overhead_us / 1e3
        # The overhead in Triton's own terms (perf_analyzer's split): the
        # batching queue, compute input and output (the copies to and from
        # the device), and the rest, the server's software.
        summary["queue_ms"] = server["avg_queue_us"] / 1e3
        summary["copies_ms"] = (server["avg_compute_input_us"] +
                                server["avg_compute_output_us"]) / 1e3
        summary["software_ms"] = (summary["server_overhead_ms"] - summary["queue_ms"] -
                                  summary["copies_ms"])
        if level["latency_us"]["avg"] > 0:
          summary["server_overhead_share"] = overhead_us / level["latency_us"]["avg"]
      return summary
  raise BenchError("bench report of %s has no concurrency %d" % (report["model"], concurrency))


def measure_server(server, runs, cli, args):
  """Starts `server` (a ServerProcess), benches each of `runs`
  [(key, model, shape, levels, extra bench flags)], stops it; ({key: bench
  report}, None or the message of an unclean exit)."""
  log("%s (logs: %s)" % (server.name, server.work_dir))
  port = server.start()
  url = "127.0.0.1:%d" % port
  reports = {}
  try:
    server.wait_ready(cli, url, sorted({run[1] for run in runs}))
    for key, model, shape, levels, extra in runs:
      log("%s: %s at concurrency %s %s" % (server.name, model, ",".join(map(str, levels)),
                                           " ".join(extra)))
      stem = os.path.join(args.logs, "%s-%s" % (server.name, key))
      reports[key] = bench(cli, url, model, shape, levels, args, stem + ".json", stem + ".txt",
                           extra)
      for level in reports[key]["levels"]:
        log("  concurrency %d: %.1f infer/s, p50 %.3f ms, p99 %.3f ms" % (
            level["concurrency"], level["throughput"]["inferences_per_s"],
            level["latency_us"]["p50"] / 1e3, level["latency_us"]["p99"] / 1e3))
  finally:
    code = server.stop()
  stop_error = None
  if code != 0:
    # Reported as an error, but the measurements stand: they were taken.
    stop_error = "%s did not exit 0 on SIGTERM (exit code %s)\n%s" % (
        server.name, code, server.output())
  return reports, stop_error


# --------------------------------------------------------------------------
# Results.

def build_rows(configurations, plans, reports):
  """One row per (configuration, level): {server: level summary}."""
  rows = []
  for configuration in configurations:
    plan = plans[configuration.label]
    for concurrency in sorted(set(plan["levels"]) | set(plan["shm_levels"])):
      row = {"configuration": configuration.label, "model": plan["model"],
             "shape": [1] + plan["shape"], "concurrency": concurrency, "servers": {}}
      for server in SERVER_ORDER:
        report = reports.get(server, {}).get(configuration.label)
        if report is not None and any(level["concurrency"] == concurrency
                                      for level in report["levels"]):
          row["servers"][server] = level_summary(report, concurrency)
      peer = row["servers"].get(PEER)
      ours = row["servers"].get(FUSESERVE)
      if peer and ours and peer["inferences_per_s"] > 0:
        row["fuseserve_over_peer"] = ours["inferences_per_s"] / peer["inferences_per_s"]
      rows.append(row)
  return rows


def evaluate_targets(rows, plans):
  results = []
  for label, level_index, kind, server, other, factor in TARGETS:
    if level_index == "scaling":
      concurrency = plans[label]["shm_levels"][-1]
    else:
      concurrency = plans[label]["levels"][level_index]
    row = next(r for r in rows if r["configuration"] == label and r["concurrency"] == concurrency)
    mine, theirs = row["servers"].get(server), row["servers"].get(other)
    result = {"configuration": label, "concurrency": concurrency, "kind": kind,
              "server": server, "against": other}
    if kind == "throughput":
      result["factor"] = factor
      result["text"] = "%s c%d: %s >= %gx %s throughput" % (
          label, concurrency, SERVER_LABELS[server], factor, SERVER_LABELS[other])
      if mine and theirs and theirs["inferences_per_s"] > 0:
        result["value"] = mine["inferences_per_s"] / theirs["inferences_per_s"]
        result["met"] = result["value"] >= factor
    else:
      result["text"] = "%s c%d: %s p99 < %s p50" % (
          label, concurrency, SERVER_LABELS[server], SERVER_LABELS[other])
      if mine and theirs:
        result["value"] = {"p99_ms": mine["p99_ms"], "other_p50_ms": theirs["p50_ms"]}
        result["met"] = mine["p99_ms"] < theirs["p50_ms"]
    result.setdefault("met", None)
    results.append(result)
  for label in OVERHEAD_CONFIGURATIONS:
    concurrency = plans[label]["levels"][0]
    row = next(r for r in rows if r["configuration"] == label and r["concurrency"] == concurrency)
    for server in (FUSESERVE, SHM):
      mine = row["servers"].get(server)
      result = {"configuration": label, "concurrency": concurrency, "kind": "overhead",
                "server": server, "limit": MAX_OVERHEAD_SHARE,
                "text": "%s c%d: %s server overhead < %d%% of end to end" % (
                    label, concurrency, SERVER_LABELS[server], 100 * MAX_OVERHEAD_SHARE)}
      if mine and "server_overhead_share" in mine:
        result["value"] = {"share": mine["server_overhead_share"],
                           "overhead_ms": mine["server_overhead_ms"],
                           "compute_ms": mine["compute_ms"], "avg_ms": mine["avg_ms"],
                           "queue_ms": mine["queue_ms"], "copies_ms": mine["copies_ms"],
                           "software_ms": mine["software_ms"]}
        result["met"] = mine["server_overhead_share"] < MAX_OVERHEAD_SHARE
      else:
        result["met"] = None
      results.append(result)
  return results


def format_table(rows, targets):
  lines = []
  header = ("config", "request", "conc", "server", "infer/s", "p50 ms", "p99 ms",
            "avg batch", "failed", "vs peer")
  table = [header]
  for row in rows:
    first = True
    for server in SERVER_ORDER:
      s = row["servers"].get(server)
      if s is None:
        continue
      ratio = ""
      if server == FUSESERVE and "fuseserve_over_peer" in row:
        ratio = "%.2fx" % row["fuseserve_over_peer"]
      table.append((row["configuration"] if first else "",
                    "x".join(map(str, row["shape"])) if first else "",
                    str(row["concurrency"]) if first else "",
                    SERVER_LABELS[server], "%.1f" % s["inferences_per_s"],
                    "%.3f" % s["p50_ms"], "%.3f" % s["p99_ms"],
                    "%.2f" % s["avg_batch_size"] if s["server_statistics"] else "n/a",
                    str(s["failed"] + s["lost"]), ratio))
      first = False
  widths = [max(len(r[i]) for r in table) for i in range(len(header))]
  for r in table:
    lines.append("  ".join(cell.ljust(w) if i < 4 else cell.rjust(w)
                           for i, (cell, w) in enumerate(zip(r, widths))).rstrip())
  lines.append("")
  lines.append("targets (issue 6):")
  for t in targets:
    verdict = {True: "MET", False: "MISSED", None: "n/a"}[t["met"]]
    if isinstance(t.get("value"), float):
      value = "%.2fx" % t["value"]
    elif "value" in t and t["kind"] == "overhead":
      v = t["value"]
      value = ("%.1f%% (%.3f ms of %.3f ms mean; GPU compute %.3f ms; the overhead is queue "
               "%.3f + compute input/output %.3f + software %.3f ms)" % (
                   100 * v["share"], v["overhead_ms"], v["avg_ms"], v["compute_ms"],
                   v["queue_ms"], v["copies_ms"], v["software_ms"]))
    elif "value" in t:
      value = "p99 %.3f ms vs p50 %.3f ms" % (t["value"]["p99_ms"], t["value"]["other_p50_ms"])
    else:
      value = "not measured"
    lines.append("  %-7s %s: %s" % (verdict, t["text"], value))
  return "\n".join(lines)


# --------------------------------------------------------------------------

def add_binary_arguments(parser):
  """The flags every script that runs fuseserve and its CLI takes (this one,
  soak.py, cpu_split.py): the binaries, where results and logs go, and the
  libraries they load."""
  parser.add_argument("--fuseserve", required=True, help="the fuseserve binary")
  parser.add_argument("--cli", required=True, help="the fuseserve-cli binary")
  parser.add_argument("--out", required=True, help="JSON results file")
  parser.add_argument("--logs", default="",
                      help="directory for server logs and every bench report (default: "
                           "<out>.logs)")
  parser.add_argument("--ld-library-path", default="",
                      help="prepended to LD_LIBRARY_PATH for fuseserve and the CLI only")


def parse_args(argv):
  parser = argparse.ArgumentParser(
      description="fuseserve against the PyTorch-eager peer and against itself without "
                  "batching, driven by fuseserve-cli bench.")
  add_binary_arguments(parser)
  parser.add_argument("--quick", action="store_true",
                      help="small repository, short windows, low concurrency (a smoke test)")
  parser.add_argument("--repository", default="",
                      help="serve this repository (copied with links) instead of the default")
  parser.add_argument("--peer-python", default=sys.executable,
                      help="interpreter of the peer (needs torch and grpcio)")
  parser.add_argument("--peer-server", choices=("threads", "aio"), default="threads")
  parser.add_argument("--peer-device", choices=("auto", "cuda", "cpu"), default="auto")
  parser.add_argument("--warmup-s", type=float, default=None, help="default 3 (quick 0.3)")
  parser.add_argument("--duration-s", type=float, default=None,
                      help="measured window per level; default 10 (quick 0.6)")
  parser.add_argument("--channels", type=int, default=DEFAULT_CHANNELS,
                      help="gRPC channels (HTTP/2 connections) of the client")
  parser.add_argument("--no-shm", action="store_true",
                      help="skip the system shared-memory runs")
  parser.add_argument("--compare-one-gpu", action="store_true",
                      help="also measure the shared-memory runs with the server limited to "
                           "GPU 0 (CUDA_VISIBLE_DEVICES=0): the multi-GPU scaling target")
  parser.add_argument("--scaling-concurrency", type=int, default=64,
                      help="the extra concurrency level of conv's shared-memory runs with "
                           "--compare-one-gpu (default 64)")
  args = parser.parse_args(argv)
  if args.warmup_s is None:
    args.warmup_s = 0.3 if args.quick else 3.0
  if args.duration_s is None:
    args.duration_s = 0.6 if args.quick else 10.0
  for path in (args.fuseserve, args.cli):
    if not os.access(path, os.X_OK):
      parser.error("%s is not an executable file" % path)
  if args.repository and not os.path.isdir(args.repository):
    parser.error("--repository %s is not a directory" % args.repository)
  if not args.logs:
    args.logs = os.path.splitext(args.out)[0] + ".logs"
  return args


def native_env(ld_library_path):
  env = dict(os.environ)
  if ld_library_path:
    env["LD_LIBRARY_PATH"] = ld_library_path + (
        ":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
  return env


def check_peer_python(python):
  done = subprocess.run([python, "-c", "import grpc, google.protobuf, torch"],
                        capture_output=True, text=True)
  if done.returncode != 0:
    raise BenchError("the peer's interpreter %s cannot import grpc, protobuf and torch:\n%s" %
                     (python, done.stderr.strip()))


def _product(values):
  result = 1
  for value in values:
    result *= value
  return result


def plan_configurations(args, repository, by_family):
  """{label: {model, levels, shape (non-batch dims), variable}}."""
  spatial = QUICK_SPATIAL if args.quick else SPATIAL
  plans = {}
  for c in CONFIGURATIONS:
    model = by_family[c.family]
    config = read_config(os.path.join(repository, model))
    dims = list(config.input[0].dims)
    # The families keep their spatial size: an output's -1 dims are the
    # input's.
    output_dims = [spatial if d == -1 else d for d in config.output[0].dims]
    plans[c.label] = {"model": model, "levels": list(c.quick_levels if args.quick else c.levels),
                      "shape": [spatial if d == -1 else d for d in dims], "variable": -1 in dims,
                      "output_bytes": 4 * _product(output_dims)}
    # The shared-memory runs of conv also measure the scaling level when
    # one GPU is compared with all of them.
    plans[c.label]["shm_levels"] = list(plans[c.label]["levels"])
    if args.compare_one_gpu and c.label == "conv":
      plans[c.label]["shm_levels"].append(args.scaling_concurrency)
  return plans


def measure(args, cli, repository, plans, nobatch):
  """({server: {configuration: bench report}}, [errors]). A server that
  cannot be measured is an error, and the other is still measured."""
  # --shape only where the config has -1 dims; otherwise bench takes the
  # metadata's dims, which also fit the no-batching variant.
  runs = [(label, plan["model"], plan["shape"] if plan["variable"] else None, plan["levels"], ())
          for label, plan in plans.items()]
  # Output regions are sized for one request's output (bench cannot infer
  # it from metadata with -1 dims).
  shm_runs = [] if args.no_shm else [
      ("shm-" + label, plan["model"], plan["shape"] if plan["variable"] else None,
       plan["shm_levels"], ("--shared-memory", "system",
                        "--output-shared-memory-size", str(plan["output_bytes"])))
      for label, plan in plans.items() if label in SHM_CONFIGURATIONS]
  max_concurrency = max(max(plan["levels"]) for plan in plans.values())
  reports, errors = {}, []

  def fuseserve_server(name, env):
    return ServerProcess(
        name, os.path.join(args.logs, name),
        lambda port_file: [args.fuseserve, "--model-repository=" + repository,
                           "--grpc-port=0", "--metrics-port=0", "--allow-shared-memory=true",
                           "--port-file=" + port_file], env)

  def split_shm(served):
    return {key[len("shm-"):]: served.pop(key) for key in list(served) if key.startswith("shm-")}

  try:
    served, stop_error = measure_server(
        fuseserve_server(FUSESERVE, cli.env),
        runs + shm_runs + [("gemm_nobatch", nobatch, None, plans["gemm"]["levels"], ())],
        cli, args)
    reports[NOBATCH] = {"gemm": served.pop("gemm_nobatch")}
    if shm_runs:
      reports[SHM] = split_shm(served)
    reports[FUSESERVE] = served
    if stop_error:
      errors.append(stop_error)
  except BenchError as e:
    errors.append(str(e))
  if args.compare_one_gpu and shm_runs:
    one_gpu_env = dict(cli.env, CUDA_VISIBLE_DEVICES="0")
    try:
      served, stop_error = measure_server(fuseserve_server(SHM_ONE_GPU, one_gpu_env),
                                          shm_runs, cli, args)
      reports[SHM_ONE_GPU] = split_shm(served)
      if stop_error:
        errors.append(stop_error)
    except BenchError as e:
      errors.append(str(e))
  # The peer's concurrency limit is the highest level measured, so that no
  # request waits for a worker thread that the client's load would not.
  peer = ServerProcess(
      PEER, os.path.join(args.logs, PEER),
      lambda port_file: [args.peer_python, PEER_SERVER, "--model-repository", repository,
                         "--address", "127.0.0.1", "--port", "0", "--port-file", port_file,
                         "--device", args.peer_device, "--server", args.peer_server,
                         "--max-concurrency", str(max_concurrency), "--cudnn-benchmark"])
  try:
    check_peer_python(args.peer_python)
    reports[PEER], stop_error = measure_server(peer, runs, cli, args)
    if stop_error:
      errors.append(stop_error)
  except BenchError as e:
    errors.append(str(e))
  return reports, errors, max_concurrency


def run(args):
  os.makedirs(args.logs, exist_ok=True)
  cli = Cli(args.cli, native_env(args.ld_library_path))
  work_dir = tempfile.mkdtemp(prefix="serving_bench_")
  try:
    log("repository in %s" % work_dir)
    repository, by_family, nobatch = prepare_repository(args, cli, work_dir)
    plans = plan_configurations(args, repository, by_family)
    reports, errors, max_concurrency = measure(args, cli, repository, plans, nobatch)
  finally:
    shutil.rmtree(work_dir, ignore_errors=True)

  rows = build_rows(CONFIGURATIONS, plans, reports)
  targets = evaluate_targets(rows, plans)
  result = {
      "settings": {"quick": args.quick, "warmup_s": args.warmup_s,
                   "duration_s": args.duration_s, "channels": args.channels,
                   "peer_server": args.peer_server, "peer_device": args.peer_device,
                   "shared_memory_runs": not args.no_shm,
                   "compare_one_gpu": args.compare_one_gpu,
                   "scaling_concurrency": args.scaling_concurrency,
                   "peer_max_concurrency": max_concurrency,
                   "repository": args.repository or "default (fuseserve-cli make-repository%s)"
                                 % (" --small" if args.quick else "")},
      "rows": rows,
      "targets": targets,
      "errors": errors,
      "reports": reports,
  }
  with open(args.out, "w") as f:
    json.dump(result, f, indent=1)
  failures = sum(s["failed"] + s["lost"] for row in rows for s in row["servers"].values())
  for error in errors:
    print("serving_bench: %s" % error, file=sys.stderr)
  print(format_table(rows, targets))
  if failures:
    print("%d request(s) failed or were lost" % failures)
  if errors:
    print("%d error(s) (messages above, on stderr)" % len(errors))
  print("results: %s (bench reports and server logs: %s)" % (args.out, args.logs))
  return 0 if failures == 0 and not errors else 1


def main(argv):
  args = parse_args(argv)
  try:
    return run(args)
  except BenchError as e:
    print("serving_bench: %s" % e, file=sys.stderr)
    return 1


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
