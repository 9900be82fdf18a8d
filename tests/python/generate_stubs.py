#!/usr/bin/env python3
"""Writes the Python gRPC stubs the Python suites use into a directory, for
hosts whose Python has grpcio but not grpc_tools (a GPU host): the suites
then read them through FUSESERVE_PY_STUBS. Uses the system's protoc and
grpc_python_plugin, whose builder-style output current protobuf runtimes read.

Usage: generate_stubs.py OUT_DIR
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fuseserve_testing as ft  # noqa: E402

if __name__ == "__main__":
  if len(sys.argv) != 2:
    print(__doc__, file=sys.stderr)
    sys.exit(2)
  os.makedirs(sys.argv[1], exist_ok=True)
  ft.generate_stubs(sys.argv[1], system_protoc=True)
