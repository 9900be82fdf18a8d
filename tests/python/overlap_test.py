#!/usr/bin/env python3
"""bench/overlap.py on synthetic batch traces (the format of
server/runtime/batch_trace.h)."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True
_BENCH_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench")
sys.path.insert(0, _BENCH_DIR)

import overlap  # noqa: E402


def batch(tid, start, input_us, compute_us, output_us, gpu=0):
  phases = []
  for name, dur in (("input", input_us), ("compute", compute_us), ("output", output_us)):
    phases.append({"name": name, "ph": "X", "pid": gpu, "tid": tid, "ts": start, "dur": dur,
                   "args": {"batch_size": 1, "requests": 1}})
    start += dur
  return phases


def names(*instances, gpu=0):
  return [{"name": "thread_name", "ph": "M", "pid": gpu, "tid": tid, "args": {"name": name}}
          for tid, name in enumerate(instances)]


class OverlapTest(unittest.TestCase):

  def write(self, events, cut_short=False):
    handle, path = tempfile.mkstemp(suffix=".json")
    self.addCleanup(os.remove, path)
    text = json.dumps(events)
    if cut_short:
      text = text[:-1] + ","  # as a server killed mid-run leaves it
    with os.fdopen(handle, "w") as f:
      f.write(text)
    return path

  def totals(self, events, cut_short=False):
    phases, _ = overlap.load_phases(self.write(events, cut_short))
    return overlap.analyse(phases[0])

  def test_pipelined_instances_overlap_copies_with_compute(self):
    events = names("a", "b", "c") + batch(0, 0, 100, 100, 100) + batch(1, 100, 100, 100, 100) + \
        batch(2, 200, 100, 100, 100)
    totals, example = self.totals(events)
    self.assertAlmostEqual(totals["busy"], 500)
    self.assertAlmostEqual(totals["input_during_other_compute"], 200)
    self.assertAlmostEqual(totals["output_during_other_compute"], 200)
    self.assertAlmostEqual(totals["input_compute_output_of_three"], 100)
    self.assertAlmostEqual(totals["compute"], 300)
    self.assertAlmostEqual(totals["input_during_other_output"], 100)
    self.assertEqual((example["input"], example["compute"], example["output"]), (2, 1, 0))

  def test_serial_batches_do_not_overlap(self):
    events = names("a", "b") + batch(0, 0, 100, 100, 100) + batch(1, 300, 100, 100, 100)
    totals, example = self.totals(events)
    self.assertAlmostEqual(totals["busy"], 600)
    self.assertEqual(totals["input_during_other_compute"], 0)
    self.assertEqual(totals["input_compute_output_of_three"], 0)
    self.assertIsNone(example)

  def test_one_instance_never_overlaps_itself(self):
    totals, _ = self.totals(names("a") + batch(0, 0, 100, 100, 100) + batch(0, 300, 10, 10, 10))
    self.assertEqual(totals["output_during_other_compute"], 0)

  def test_reads_a_trace_cut_short(self):
    totals, _ = self.totals(names("a") + batch(0, 0, 10, 20, 30), cut_short=True)
    self.assertAlmostEqual(totals["busy"], 60)

  def test_command_line_prints_each_gpu(self):
    events = names("a", "b", gpu=0) + names("c", gpu=1) + batch(0, 0, 100, 100, 100) + \
        batch(1, 100, 100, 100, 100) + batch(0, 0, 5, 5, 5, gpu=1)
    done = subprocess.run([sys.executable, os.path.join(_BENCH_DIR, "overlap.py"),
                           self.write(events)], capture_output=True, text=True)
    self.assertEqual(done.returncode, 0, done.stderr)
    self.assertIn("GPU 0: 2 instance(s), 2 batches", done.stdout)
    self.assertIn("GPU 1: 1 instance(s), 1 batches", done.stdout)


if __name__ == "__main__":
  unittest.main(verbosity=2)
