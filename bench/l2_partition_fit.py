#!/usr/bin/env python3
"""Reads bench/l2_partition_probe.cu's cycles file (uint16 [SMs + 1][8192])
and prints: the latency classes of SM 0's loads, the SMs grouped by which
lines are near to them, and the address bits whose parity gives a line's
side (bench/kernel_notes.md v29). No numpy: the GPU host and CI lack it here.

  python3 bench/l2_partition_fit.py partition_cycles.bin
"""
import collections
import struct
import sys

LINES = 8192
FINE = 4096  # lines at 128-byte steps, then 4 KiB steps from 512 KiB


def offset(i):
  return 128 * i if i < FINE else FINE * 128 + (i - FINE) * 4096


def near(cycles):
  # Near hit ~280, far hit ~460, near miss ~560, far miss ~740 cycles (H200).
  return cycles < 380 or 530 <= cycles < 640


def fit(labels, idx, bits):
  """The bit subset (and constant) whose parity best matches labels[idx]."""
  target = 0
  columns = {b: 0 for b in bits}
  for k, i in enumerate(idx):
    if labels[i]:
      target |= 1 << k
    for b in bits:
      if (offset(i) >> b) & 1:
        columns[b] |= 1 << k
  n = len(idx)
  best = None
  for mask in range(1 << len(bits)):
    x = 0
    for j, b in enumerate(bits):
      if (mask >> j) & 1:
        x ^= columns[b]
    for constant in (0, 1):
      y = x ^ ((1 << n) - 1) if constant else x
      errors = bin(y ^ target).count("1")
      if best is None or errors < best[0]:
        best = (errors, mask, constant)
  errors, mask, constant = best
  return errors / n, [b for j, b in enumerate(bits) if (mask >> j) & 1], constant


def main():
  data = open(sys.argv[1], "rb").read()
  values = struct.unpack("<%dH" % (len(data) // 2), data)
  rows = [values[r * LINES:(r + 1) * LINES] for r in range(len(values) // LINES)]
  sms = len(rows) - 1
  classes = collections.Counter(min(v // 20 * 20, 1200) for v in rows[0])
  print("SM 0 latency classes (cycles: lines):",
        ", ".join("%d: %d" % (k, classes[k]) for k in sorted(classes) if classes[k] > 40))
  second = sorted(rows[sms])
  print("SM 0 again after every SM read every line: p10 %d, p50 %d, p90 %d" %
        (second[LINES // 10], second[LINES // 2], second[LINES * 9 // 10]))
  labels = [tuple(near(v) for v in rows[r]) for r in range(sms)]
  clusters = []
  for r in range(sms):
    for cluster in clusters:
      if sum(x != y for x, y in zip(labels[r], labels[cluster[0]])) < 0.15 * LINES:
        cluster.append(r)
        break
    else:
      clusters.append([r])
  for cluster in clusters:
    print("side of SM %d: %d SMs %s" % (cluster[0], len(cluster), cluster))
  # A line's side seen from the first cluster, by majority over both clusters.
  first, others = clusters[0], [r for c in clusters[1:] for r in c]
  side = [sum(labels[r][i] for r in first) + sum(not labels[r][i] for r in others) >
          sms / 2 for i in range(LINES)]
  print("fine lines (bits 7-18): error %.3f, bits %s, constant %d" %
        fit(side, range(FINE), list(range(7, 19))))
  print("coarse lines (bits 12-23): error %.3f, bits %s, constant %d" %
        fit(side, range(FINE, LINES), list(range(12, 24))))


if __name__ == "__main__":
  main()
