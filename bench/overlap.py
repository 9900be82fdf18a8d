#!/usr/bin/env python3
"""How much one GPU instance's copies overlap other instances' work, from a
batch trace (fuseserve --batch-trace-file; server/runtime/batch_trace.h).

Each batch is three phases on its instance's stream: input (gather + H2D),
compute (kernels), output (D2H). For every GPU this sums, over the traced
time, how long:
  - any phase ran at all (busy), and any compute ran (compute);
  - an input phase ran while another instance computed, and an output phase;
  - an input ran while another instance's output ran (both copy directions
    at once);
  - an input, a compute and an output of three different instances ran at
    once (issue 6: "the H2D copy of one batch overlaps the compute of another
    and the D2H of a third");
and prints the first such triple as an example. Overlap with compute is also
given as a share of the compute time: with small kernels and large tensors
(the conv family) compute is a small part of the busy time, and what matters
is whether the copies hide it.

Usage: overlap.py TRACE [--json OUT]
"""

import argparse
import collections
import json
import sys


def load_phases(path):
  """{gpu: [(begin_us, end_us, instance, phase)]} and {(gpu, tid): name}."""
  with open(path) as f:
    text = f.read().rstrip()
  if not text.endswith("]"):
    text = text.rstrip(",") + "]"  # a trace cut short by a crash
  events = json.loads(text)
  names = {}
  phases = collections.defaultdict(list)
  for event in events:
    if event.get("ph") == "M" and event.get("name") == "thread_name":
      names[(event["pid"], event["tid"])] = event["args"]["name"]
    elif event.get("ph") == "X":
      begin = float(event["ts"])
      phases[event["pid"]].append((begin, begin + float(event["dur"]), event["tid"], event["name"]))
  return phases, names


def analyse(intervals):
  """Sweeps the GPU's intervals; seconds of each kind of overlap."""
  points = []
  for begin, end, tid, phase in intervals:
    if end > begin:
      points.append((begin, 1, tid, phase))
      points.append((end, -1, tid, phase))
  points.sort(key=lambda p: (p[0], p[1]))
  active = collections.Counter()
  totals = collections.Counter()
  example = None
  last = None
  for time, step, tid, phase in points:
    if last is not None and time > last and active:
      span = time - last
      running = [key for key, count in active.items() if count > 0]
      by_phase = collections.defaultdict(set)
      for key_tid, key_phase in running:
        by_phase[key_phase].add(key_tid)
      totals["busy"] += span
      computing = by_phase["compute"]
      if computing:
        totals["compute"] += span
      if by_phase["input"] and by_phase["output"] and (
          len(by_phase["input"] | by_phase["output"]) > 1):
        totals["input_during_other_output"] += span

      if by_phase["input"] and computing and (computing - by_phase["input"]):
        totals["input_during_other_compute"] += span
      if by_phase["output"] and computing and (computing - by_phase["output"]):
        totals["output_during_other_compute"] += span
      triple = next(((i, c, o) for i in by_phase["input"] for c in computing
                     for o in by_phase["output"] if len({i, c, o}) == 3), None)
      if triple is not None:
        totals["input_compute_output_of_three"] += span
        if example is None:
          example = {"at_us": last, "for_us": span, "input": triple[0], "compute": triple[1],
                     "output": triple[2]}
    active[(tid, phase)] += step
    last = time
  return totals, example


def main(argv):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("trace")
  parser.add_argument("--json", help="write the figures here too")
  args = parser.parse_args(argv)
  phases, names = load_phases(args.trace)
  if not phases:
    print("overlap.py: %s has no batch phases" % args.trace, file=sys.stderr)
    return 1
  report = {}
  for gpu in sorted(phases):
    intervals = phases[gpu]
    totals, example = analyse(intervals)
    instances = sorted({names.get((gpu, tid), str(tid)) for _, _, tid, _ in intervals})
    span = max(e for _, e, _, _ in intervals) - min(b for b, _, _, _ in intervals)
    entry = {"instances": instances, "batches": len(intervals) // 3, "traced_us": span}
    entry.update({k: v for k, v in totals.items()})
    if example is not None:
      example = dict(example, **{k: names.get((gpu, example[k]), str(example[k]))
                                 for k in ("input", "compute", "output")})
    entry["example"] = example
    report[gpu] = entry
    busy = totals["busy"] or 1.0
    compute = totals["compute"] or 1.0
    print("GPU %d: %d instance(s), %d batches over %.1f ms, busy %.1f ms, computing %.1f ms" % (
        gpu, len(instances), entry["batches"], span / 1e3, totals["busy"] / 1e3,
        totals["compute"] / 1e3))
    for key, text in (("input_during_other_compute", "input while another instance computes"),
                      ("output_during_other_compute", "output while another instance computes"),
                      ("input_compute_output_of_three",
                       "input, compute and output of three instances at once")):
      print("  %-55s %8.1f ms  (%5.1f%% of compute time, %4.1f%% of busy time)" % (
          text, totals[key] / 1e3, 100.0 * totals[key] / compute, 100.0 * totals[key] / busy))
    print("  %-55s %8.1f ms  (%4.1f%% of busy time)" % (
        "input while another instance's output copies", totals["input_during_other_output"] / 1e3,
        100.0 * totals["input_during_other_output"] / busy))
    if example is not None:
      print("  e.g. at %.3f ms for %.1f us: input of %s, compute of %s, output of %s" % (
          example["at_us"] / 1e3, example["for_us"], example["input"], example["compute"],
          example["output"]))
  if args.json:
    with open(args.json, "w") as f:
      json.dump(report, f, indent=1)
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
