#!/usr/bin/env bash
# On the GPU host (through `device`; needs nothing carried): the L2 reuse
# probe's `fabric` mode (bench/l2_reuse_probe.cu), timed, then once more
# under ncu at the GPU's own clocks with the L2-fabric, DRAM and hit-rate
# counters, one line per kernel launch. Which SM makes a second read, and
# whether that read crosses between Hopper's two L2 partitions
# (bench/kernel_notes.md v29). Output: $OUT/plain.txt, $OUT/ncu.csv.
#   scripts/gpu/fabric_probe.sh [GiB=1] [CTAs per SM=3]
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/fuseserve-gpu-out}
mkdir -p "$OUT"
gib=${1:-1}
ctas=${2:-3}
nvidia-smi --query-gpu=name --format=csv,noheader
nvcc -O3 -std=c++17 -arch=sm_90a -I. -o /tmp/probe bench/l2_reuse_probe.cu || exit 1
/tmp/probe "$gib" "$ctas" fabric | tee "$OUT/plain.txt"
ncu --clock-control none --csv --metrics \
  lts__t_sectors_srcunit_ltcfabric.sum,lts__ltcfabric2ltc_cycles_active.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum,lts__t_sector_hit_rate.pct \
  /tmp/probe "$gib" "$ctas" fabric > "$OUT/ncu.csv" 2>&1
python3 - "$OUT/ncu.csv" <<'PY'
import collections, csv, sys
header = None
launches = collections.OrderedDict()
for row in csv.reader(open(sys.argv[1])):
  if row and row[0] == "ID":
    header = row
    continue
  if header and len(row) == len(header):
    d = dict(zip(header, row))
    launch = launches.setdefault(int(d["ID"]), {"kernel": d["Kernel Name"].split("(")[0]})
    launch[d["Metric Name"]] = d["Metric Value"]
print("id kernel us fabric_sectors fabric_busy% dram_read_bytes l2_hit%")
for i, m in launches.items():
  print(i, m["kernel"], m["gpu__time_duration.sum"], m["lts__t_sectors_srcunit_ltcfabric.sum"],
        m["lts__ltcfabric2ltc_cycles_active.avg.pct_of_peak_sustained_elapsed"],
        m["dram__bytes_read.sum"], m["lts__t_sector_hit_rate.pct"])
PY
