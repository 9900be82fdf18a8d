#!/usr/bin/python3
"""bench/cpu_split.py end to end on the small repository: one server, one
`fuseserve-cli bench` per run, the CPU split by thread name, the client's
latency percentiles, the server's phases per request and its latency
histograms over the run, for a fixed-shape
model (gemm) and one whose dims are variable (groupnorm: cpu_split must give
it --shape), through system shared memory, with the batching delay and a
server flag overridden (FUSESERVE_BINARY, FUSESERVE_CLI).
"""

import json
import mmap
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True
_THIS_DIR = os.path.dirname(os.path.abspath(__file__))
_BENCH_DIR = os.path.normpath(os.path.join(_THIS_DIR, "..", "..", "bench"))
sys.path.insert(0, _THIS_DIR)

import fuseserve_testing as ft  # noqa: E402

_MISSING = ft.missing_dependencies(need_torch=False)
_SKIP_REASON = "needs %s in %s" % (", ".join(_MISSING), sys.executable)

CPU_SPLIT = os.path.join(_BENCH_DIR, "cpu_split.py")
PHASES = ("queue", "compute_input", "compute_infer", "compute_output")


@unittest.skipIf(_MISSING, _SKIP_REASON)
class CpuSplitTest(unittest.TestCase):

  def test_reconfigure_sets_how_gpu_instances_wait_and_leaves_the_rest(self):
    sys.path.insert(0, _BENCH_DIR)
    import cpu_split  # noqa: E402  (needs the stubs that _MISSING checks)
    repository = tempfile.mkdtemp(prefix="cpu_split_repo_")
    self.addCleanup(shutil.rmtree, repository, True)
    os.makedirs(os.path.join(repository, "m"))
    with open(os.path.join(repository, "m", "config.pbtxt"), "w") as f:
      f.write('name: "m"\nmax_batch_size: 4\n'
              'dynamic_batching { max_queue_delay_microseconds: 100 }\n'
              'optimization { cuda { busy_wait_events: true } }\n')
    cpu_split.reconfigure(repository, 0, -1, False)
    config = cpu_split.sb.read_config(os.path.join(repository, "m"))
    self.assertFalse(config.optimization.cuda.busy_wait_events)
    self.assertEqual(config.dynamic_batching.max_queue_delay_microseconds, 100)
    cpu_split.reconfigure(repository, 0, -1, True)
    config = cpu_split.sb.read_config(os.path.join(repository, "m"))
    self.assertTrue(config.optimization.cuda.busy_wait_events)
    cpu_split.reconfigure(repository, 0, -1, None)
    self.assertTrue(cpu_split.sb.read_config(
        os.path.join(repository, "m")).optimization.cuda.busy_wait_events)

  def test_minor_faults_count_the_pages_a_process_touches_first(self):
    sys.path.insert(0, _BENCH_DIR)
    import cpu_split  # noqa: E402
    pages = 1024
    region = mmap.mmap(-1, pages * mmap.PAGESIZE)
    self.addCleanup(region.close)
    # Small pages only: a transparent huge page would take 512 of them in one fault.
    region.madvise(mmap.MADV_NOHUGEPAGE)
    before = cpu_split.minor_faults(os.getpid())
    for page in range(pages):
      region[page * mmap.PAGESIZE] = 1
    self.assertGreaterEqual(cpu_split.minor_faults(os.getpid()) - before, pages)

  def test_quick_runs_record_the_split_latency_and_phases_with_overrides(self):
    work_dir = tempfile.mkdtemp(prefix="cpu_split_test_")
    self.addCleanup(shutil.rmtree, work_dir, True)
    out = os.path.join(work_dir, "cpu.json")
    done = subprocess.run(
        [sys.executable, CPU_SPLIT, "--quick", "--fuseserve", os.environ["FUSESERVE_BINARY"],
         "--cli", os.environ["FUSESERVE_CLI"], "--out", out, "--run", "gemm:2",
         "--run", "groupnorm:2", "--shared-memory", "--queue-delay-us", "0",
         "--busy-wait-events", "off",
         "--server-arg=--response-threads=2", "--duration-s", "2.5", "--warmup-s", "0.5"],
        capture_output=True, text=True, timeout=240)
    self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
    with open(out) as f:
      result = json.load(f)

    settings = result["settings"]
    self.assertEqual(settings["queue_delay_us"], 0)
    self.assertEqual(settings["busy_wait_events"], "off")
    self.assertEqual(settings["server_args"], ["--response-threads=2"])
    self.assertEqual(settings["tensors"], "system shared memory")
    self.assertEqual(result["server_exit_code"], 0)
    self.assertEqual([(r["model"], r["concurrency"]) for r in result["runs"]],
                     [("gemm_bias_hardtanh_mish_groupnorm", 2), ("groupnorm", 2)])
    for run in result["runs"]:
      self.assertGreater(run["inferences_per_s"], 0, run)
      self.assertEqual(run["failed"], 0, run)
      latency = run["latency_us"]
      self.assertGreater(latency["p50"], 0, run)
      self.assertLessEqual(latency["p50"], latency["p99"], run)
      # The phases are parts of the server's own request time.
      phases = run["server_phases_us"]
      for phase in PHASES:
        self.assertGreaterEqual(phases[phase], 0, (phase, run))
      self.assertLessEqual(sum(phases[p] for p in PHASES), phases["request"] * 1.001 + 1, run)
      for side in ("server", "client"):
        self.assertGreater(run[side]["us_per_inference"], 0, (side, run))
        self.assertGreaterEqual(run[side]["minor_faults_per_inference"], 0, (side, run))
        self.assertTrue(run[side]["threads"], (side, run))
      # The server's histograms over the run (warm-up included) hold at
      # least the measured requests, their buckets add up to the count, and
      # a percentile is a bucket bound.
      histograms = run["server_histograms"]
      self.assertEqual(sorted(histograms), ["compute_infer", "queue", "request"], run)
      request = histograms["request"]
      measured = run["inferences_per_s"] * 2.5
      self.assertGreaterEqual(request["count"], 0.9 * measured, run)
      self.assertAlmostEqual(sum(c for _, c in request["buckets"]), request["count"])
      bounds = [b for b, _ in request["buckets"]]
      for q in ("p50_le_us", "p90_le_us", "p99_le_us"):
        self.assertIn(request[q], bounds, (q, run))
      self.assertLessEqual(request["p50_le_us"], request["p99_le_us"], run)


if __name__ == "__main__":
  ft.run_tests()
