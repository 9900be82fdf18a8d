#!/usr/bin/python3
"""bench/peer_server.py, the PyTorch-eager peer, and bench/serving_bench.py.

The peer serves a repository written here with random weights (GroupNorm
affine parameters included) and non-default hyper-parameters; its answers
are compared with the families computed here in float64 from the same
weights with torch.nn.functional (not the peer's modules), under the fp32
contract of SPEC.md §1.4 (the conv model asks for fp32, so a GPU peer must
turn cuDNN's TF32 off). Both server flavours (thread pool, asyncio) run
every test. Then serving_bench.py --quick runs end to end against the built
fuseserve and fuseserve-cli (FUSESERVE_BINARY, FUSESERVE_CLI) and the peer.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

# Keeps the source tree free of __pycache__ (the helpers are imported from it).
sys.dont_write_bytecode = True
_THIS_DIR = os.path.dirname(os.path.abspath(__file__))
_BENCH_DIR = os.path.normpath(os.path.join(_THIS_DIR, "..", "..", "bench"))
sys.path.insert(0, _THIS_DIR)
sys.path.insert(0, _BENCH_DIR)

import fuseserve_testing as ft  # noqa: E402

_MISSING = ft.missing_dependencies(need_torch=True)
_SKIP_REASON = "needs %s in %s" % (", ".join(_MISSING), sys.executable)

if not _MISSING:
  import numpy as np
  import torch
  import torch.nn.functional as F

  import serving_bench

PEER_SERVER = os.path.join(_BENCH_DIR, "peer_server.py")
SERVING_BENCH = os.path.join(_BENCH_DIR, "serving_bench.py")

CONV = "conv_stride2_fp32"
GEMM = "gemm_unbatched_hardtanh"
GROUPNORM = "groupnorm_variable"
BROKEN = "gemm_missing_bias"

CONV_GEOMETRY = dict(stride=2, padding=1, output_padding=1)
GEMM_HYPER = dict(groups=4, lo=-0.5, hi=0.75, eps=1e-4)


def conv_reference(w, x):
  y = F.conv_transpose2d(x, w["conv_transpose.weight"], w["conv_transpose.bias"], **CONV_GEOMETRY)
  return F.group_norm(F.gelu(y), 2, w["group_norm.weight"], w["group_norm.bias"], 1e-5)


def gemm_reference(w, x):
  y = F.linear(x, w["gemm.weight"], w["gemm.bias"]) + w["bias"]
  y = F.mish(F.hardtanh(y, GEMM_HYPER["lo"], GEMM_HYPER["hi"]))
  return F.group_norm(y, GEMM_HYPER["groups"], w["groupnorm.weight"], w["groupnorm.bias"],
                      GEMM_HYPER["eps"])


def groupnorm_reference(w, x):
  return F.group_norm(x, 3, w["gn.weight"], w["gn.bias"], 1e-5)


def random_weights(generator, shapes):
  return {name: torch.randn(*shape, generator=generator) * 0.5 for name, shape in shapes.items()}


@unittest.skipIf(_MISSING, _SKIP_REASON)
class PeerServerTest(unittest.TestCase):
  flavour = "threads"

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.work_dir = tempfile.mkdtemp(prefix="peer_server_test_")
    try:
      repository = os.path.join(cls.work_dir, "models")
      cls.weights = cls.populate_repository(repository)
      cls.peer = serving_bench.ServerProcess(
          "peer", os.path.join(cls.work_dir, "peer"),
          lambda port_file: [sys.executable, PEER_SERVER, "--model-repository", repository,
                             "--address", "127.0.0.1", "--port", "0", "--port-file", port_file,
                             "--server", cls.flavour, "--max-concurrency", "4"])
      port = cls.peer.start(timeout_s=120)
    except BaseException:
      shutil.rmtree(cls.work_dir, ignore_errors=True)
      raise
    cls.p = ft.protos()
    cls.channel = ft.grpc.insecure_channel("127.0.0.1:%d" % port, options=ft.CHANNEL_OPTIONS)
    cls.stub = cls.p.service_grpc.GRPCInferenceServiceStub(cls.channel)

  @classmethod
  def tearDownClass(cls):
    try:
      cls.channel.close()
      code = cls.peer.stop()
      if code != 0:
        raise AssertionError("the peer did not exit 0 on SIGTERM (exit code %s)\n%s" %
                             (code, cls.peer.output()))
    finally:
      shutil.rmtree(cls.work_dir, ignore_errors=True)
      super().tearDownClass()

  @classmethod
  def populate_repository(cls, repository):
    """Writes the four models; returns {model: float64 weights}."""
    generator = torch.Generator().manual_seed(6)
    conv = random_weights(generator, {"conv_transpose.weight": (3, 4, 3, 3),
                                      "conv_transpose.bias": (4,), "group_norm.weight": (4,),
                                      "group_norm.bias": (4,)})
    gemm = random_weights(generator, {"gemm.weight": (16, 24), "gemm.bias": (16,), "bias": (16,),
                                      "groupnorm.weight": (16,), "groupnorm.bias": (16,)})
    norm = random_weights(generator, {"gn.weight": (6,), "gn.bias": (6,)})
    ft.add_model(repository, CONV, ft.config_pbtxt(
        CONV, ft.FAMILY_CONV, 4, [3, 5, 6], [4, 10, 12],
        {"in_channels": 3, "out_channels": 4, "kernel_size": 3, "stride": 2, "padding": 1,
         "output_padding": 1, "num_groups": 2, "precision": "fp32"}), conv)
    gemm_parameters = {"in_features": 24, "out_features": 16, "num_groups": 4,
                       "hardtanh_min": -0.5, "hardtanh_max": 0.75, "eps": 1e-4}
    ft.add_model(repository, GEMM, ft.config_pbtxt(GEMM, ft.FAMILY_GEMM, 0, [3, 24], [3, 16],
                                                   gemm_parameters), gemm)
    ft.add_model(repository, GROUPNORM, ft.config_pbtxt(
        GROUPNORM, ft.FAMILY_GROUPNORM, 8, [6, -1, -1], [6, -1, -1],
        {"num_channels": 6, "num_groups": 3}), norm)
    broken = {k: v for k, v in gemm.items() if k != "bias"}
    ft.add_model(repository, BROKEN, ft.config_pbtxt(BROKEN, ft.FAMILY_GEMM, 4, [24], [16],
                                                     gemm_parameters), broken)
    as_float64 = lambda tensors: {k: v.double() for k, v in tensors.items()}  # noqa: E731
    return {CONV: as_float64(conv), GEMM: as_float64(gemm), GROUPNORM: as_float64(norm)}

  def infer(self, model, array, **kwargs):
    return ft.infer(self.stub, model, array, timeout=60, **kwargs)

  def assert_rpc_error(self, request, code, needle):
    with self.assertRaises(ft.grpc.RpcError) as raised:
      self.stub.ModelInfer(request, timeout=30)
    self.assertEqual(raised.exception.code(), code, raised.exception.details())
    self.assertIn(needle, raised.exception.details())

  def test_answers_match_the_families_computed_from_the_same_weights(self):
    rng = np.random.default_rng(7)
    cases = [(CONV, conv_reference, [1, 3, 5, 6]), (CONV, conv_reference, [3, 3, 5, 6]),
             (GEMM, gemm_reference, [3, 24]),
             (GROUPNORM, groupnorm_reference, [2, 6, 7, 5]),
             (GROUPNORM, groupnorm_reference, [1, 6, 4, 9])]
    for model, reference, shape in cases:
      for name, x in (("U[0,1)", rng.random(shape)), ("N(0,1)", rng.standard_normal(shape))):
        x = x.astype(np.float32)
        y, response = self.infer(model, x, request_id="r-%s" % model)
        expected = reference(self.weights[model], torch.from_numpy(x).double()).numpy()
        problem = ft.accuracy_problem(y, expected, "fp32")
        self.assertIsNone(problem, "%s %s on %s inputs: %s" % (model, shape, name, problem))
        self.assertEqual(response.id, "r-%s" % model)
        self.assertEqual(response.model_version, "1")

  def test_metadata_and_config_give_the_full_dims_and_max_batch_size(self):
    for model, input_shape, max_batch_size in ((CONV, [-1, 3, 5, 6], 4), (GEMM, [3, 24], 0),
                                               (GROUPNORM, [-1, 6, -1, -1], 8)):
      metadata = self.stub.ModelMetadata(self.p.service.ModelMetadataRequest(name=model))
      self.assertEqual(list(metadata.inputs[0].shape), input_shape, model)
      self.assertEqual(metadata.inputs[0].datatype, "FP32")
      config = self.stub.ModelConfig(self.p.service.ModelConfigRequest(name=model)).config
      self.assertEqual(config.max_batch_size, max_batch_size, model)
      self.assertEqual(config.name, model)

  def test_unknown_model_is_not_found(self):
    self.assert_rpc_error(ft.infer_request("no_such_model", np.zeros([1, 24], np.float32)),
                          ft.grpc.StatusCode.NOT_FOUND, "no_such_model")

  def test_wrong_raw_byte_count_is_invalid_argument(self):
    request = ft.infer_request(GEMM, np.zeros([3, 24], np.float32))
    request.raw_input_contents[0] = request.raw_input_contents[0][:-4]
    self.assert_rpc_error(request, ft.grpc.StatusCode.INVALID_ARGUMENT, "284 bytes")

  def test_shapes_the_config_forbids_are_invalid_argument(self):
    for model, shape, needle in ((CONV, [5, 3, 5, 6], "max_batch_size 4"),
                                 (CONV, [1, 3, 5, 7], "dimension 3 is 7"),
                                 (GEMM, [2, 24], "dimension 0 is 2"),
                                 (GROUPNORM, [1, 6, 4], "rank 3")):
      self.assert_rpc_error(ft.infer_request(model, np.zeros(shape, np.float32)),
                            ft.grpc.StatusCode.INVALID_ARGUMENT, needle)

  def test_model_whose_weights_lack_a_tensor_is_not_served_and_says_which(self):
    ready = self.stub.ModelReady(self.p.service.ModelReadyRequest(name=BROKEN))
    self.assertFalse(ready.ready)
    self.assertTrue(self.stub.ModelReady(self.p.service.ModelReadyRequest(name=GEMM)).ready)
    self.assert_rpc_error(ft.infer_request(BROKEN, np.zeros([1, 24], np.float32)),
                          ft.grpc.StatusCode.UNAVAILABLE, '"bias"')

  def test_statistics_count_each_request_as_one_execution(self):
    def counts():
      stats = self.stub.ModelStatistics(
          self.p.service.ModelStatisticsRequest(name=GROUPNORM)).model_stats[0]
      return stats.execution_count, stats.inference_count, stats.inference_stats.success.count

    before = counts()
    for batch in (1, 3):
      self.infer(GROUPNORM, np.ones([batch, 6, 2, 2], np.float32))
    after = counts()
    self.assertEqual([a - b for a, b in zip(after, before)], [2, 4, 2])


class AsyncioPeerServerTest(PeerServerTest):
  flavour = "aio"


@unittest.skipIf(_MISSING, _SKIP_REASON)
@unittest.skipUnless(os.environ.get("FUSESERVE_BINARY") and os.environ.get("FUSESERVE_CLI"),
                     "needs FUSESERVE_BINARY and FUSESERVE_CLI (set by ctest)")
class ServingBenchTest(unittest.TestCase):

  def test_quick_run_benches_both_servers_and_writes_the_table_and_json(self):
    work_dir = tempfile.mkdtemp(prefix="serving_bench_test_")
    self.addCleanup(shutil.rmtree, work_dir, True)
    out = os.path.join(work_dir, "serving.json")
    done = subprocess.run(
        [sys.executable, SERVING_BENCH, "--quick", "--fuseserve", os.environ["FUSESERVE_BINARY"],
         "--cli", os.environ["FUSESERVE_CLI"], "--out", out, "--peer-device", "cpu"],
        capture_output=True, text=True, timeout=240)
    self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
    with open(out) as f:
      result = json.load(f)

    servers = {(row["configuration"], row["concurrency"]): row["servers"]
               for row in result["rows"]}
    self.assertEqual(sorted(servers), [("conv", 1), ("conv", 2), ("gemm", 1), ("gemm", 4),
                                       ("groupnorm", 1), ("groupnorm", 2)])
    for (label, concurrency), by_server in servers.items():
      expected = {"fuseserve", "peer"} | ({"fuseserve_nobatch"} if label == "gemm" else
                                          {"fuseserve_shm"})
      self.assertEqual(set(by_server), expected, label)
      for server, level in by_server.items():
        self.assertGreater(level["inferences_per_s"], 0, (label, server))
        self.assertEqual(level["failed"] + level["lost"], 0, (label, server))
        if server in ("peer", "fuseserve_nobatch"):
          # Neither the peer nor the no-batching variant merges requests: one
          # inference per execution. The statistics are read while requests
          # are in flight, and an execution is counted before its request's
          # success, so each end of the window may hold up to `concurrency`
          # executions whose inferences fall outside it.
          skew = abs(level["inferences"] - level["executions"])
          self.assertLessEqual(skew, 2 * concurrency, (label, server, level))
          self.assertGreater(level["executions"], 0, (label, server))
    self.assertEqual([row["shape"] for row in result["rows"] if row["concurrency"] == 1],
                     [[1, 64], [1, 8, 16, 16], [1, 8, 16, 16]])
    # 5 against the peer and no batching, 2 shared memory against gRPC, 1
    # two GPUs against one (not measured without --compare-one-gpu), and the
    # server overhead of conv and groupnorm over gRPC and shared memory.
    self.assertEqual(len(result["targets"]), 12)
    unmeasured = [t for t in result["targets"] if t["met"] is None]
    self.assertEqual([t["against"] for t in unmeasured], ["fuseserve_shm_1gpu"],
                     result["targets"])
    for target in result["targets"]:
      if target["kind"] == "overhead":
        self.assertGreater(target["value"]["share"], 0, target)
        self.assertLess(target["value"]["share"], 1, target)
        # Triton's split of the overhead: the queue and the copies are phases
        # of the server's own request time, so they fit inside the overhead.
        value = target["value"]
        self.assertGreaterEqual(value["queue_ms"], 0, target)
        self.assertGreaterEqual(value["copies_ms"], 0, target)
        self.assertLessEqual(value["queue_ms"] + value["copies_ms"],
                             value["overhead_ms"] * 1.001 + 1e-3, target)
    self.assertIn("targets (issue 6):", done.stdout)
    self.assertTrue(done.stdout.rstrip().splitlines()[-1].startswith("results: "), done.stdout)


if __name__ == "__main__":
  ft.run_tests()
