#!/usr/bin/python3
"""What Triton's Python client (tritonclient.grpc) and perf_analyzer rely on.

REFERENCE.md §1.6 lists the behaviours: health and metadata RPCs, metadata
shapes [-1] + dims for batching models, ModelConfig, raw_input_contents in and
one raw_output_contents entry per output out, the request id echoed,
statistics, and the status codes of SPEC.md §3 for malformed requests. The
weights are random numpy arrays; answers are checked against a float64 numpy
GroupNorm, so these tests need numpy and grpcio but not torch.
"""

import os
import sys
import unittest

# Keeps the source tree free of __pycache__ (the helpers are imported from it).
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fuseserve_testing as ft  # noqa: E402

if ft.HAVE_NUMPY:
  import numpy as np

_MISSING = ft.missing_dependencies(need_torch=False)
_SKIP_REASON = "needs %s in %s" % (", ".join(_MISSING), sys.executable)


def groupnorm_reference(x, num_groups, weight, bias, eps=1e-5):
  """GroupNorm in float64 (SPEC.md §1.3): biased variance per sample and group."""
  x = np.asarray(x, dtype=np.float64)
  n, c = x.shape[0], x.shape[1]
  grouped = x.reshape(n, num_groups, -1)
  mean = grouped.mean(axis=2, keepdims=True)
  var = ((grouped - mean) ** 2).mean(axis=2, keepdims=True)
  normalized = ((grouped - mean) / np.sqrt(var + eps)).reshape(x.shape)
  affine_shape = [1, c] + [1] * (x.ndim - 2)
  return (normalized * np.asarray(weight, np.float64).reshape(affine_shape) +
          np.asarray(bias, np.float64).reshape(affine_shape))


def random_groupnorm_weights(rng, channels, prefix="gn"):
  return {prefix + ".weight": rng.standard_normal(channels).astype(np.float32),
          prefix + ".bias": rng.standard_normal(channels).astype(np.float32)}


def gemm_weights(rng, fin, fout):
  return {"gemm.weight": rng.uniform(-0.3, 0.3, (fout, fin)).astype(np.float32),
          "gemm.bias": rng.standard_normal(fout).astype(np.float32),
          "bias": rng.standard_normal(fout).astype(np.float32),
          "groupnorm.weight": rng.standard_normal(fout).astype(np.float32),
          "groupnorm.bias": rng.standard_normal(fout).astype(np.float32)}


def conv_weights(rng, cin, cout, k):
  return {"conv_transpose.weight": rng.uniform(-0.3, 0.3, (cin, cout, k, k)).astype(np.float32),
          "conv_transpose.bias": rng.standard_normal(cout).astype(np.float32),
          "group_norm.weight": rng.standard_normal(cout).astype(np.float32),
          "group_norm.bias": rng.standard_normal(cout).astype(np.float32)}


class RpcAssertions:
  """Mixin for ServerTestCase subclasses."""

  def assert_rpc_error(self, call, request, code, needles=()):
    """`call(request)` fails with `code` and a message containing, for each
    entry of `needles`, that string (or one string of that tuple),
    case-insensitively."""
    with self.assertRaises(ft.grpc.RpcError, msg="expected %s" % code) as raised:
      call(request, timeout=30)
    error = raised.exception
    details = error.details() or ""
    self.assertEqual(error.code(), code,
                     "expected %s, got %s: %s" % (code, error.code(), details))
    for needle in needles:
      options = needle if isinstance(needle, tuple) else (needle,)
      self.assertTrue(any(o.lower() in details.lower() for o in options),
                      "error message %r names none of %s" % (details, list(options)))
    return details


@unittest.skipIf(_MISSING, _SKIP_REASON)
class ProtocolTest(RpcAssertions, ft.ServerTestCase):
  """One server with a handful of small, healthy models."""

  weights = {}

  @classmethod
  def populate_repository(cls, repository):
    rng = np.random.default_rng(20240611)
    groupnorms = {
        # name: (channels, groups, max_batch_size, dims, dynamic_batching)
        "gn_batch": (4, 2, 8, [4, -1], {"max_queue_delay_microseconds": 2000}),
        "gn_fixed": (2, 1, 0, [2, 2, 3], None),
        "gn_stats": (4, 2, 4, [4, 3], None),
        "gn_large": (4, 4, 0, [1, 4, -1], None),
    }
    for name, (channels, groups, max_batch, dims, batching) in groupnorms.items():
      weights = random_groupnorm_weights(rng, channels)
      cls.weights[name] = (groups, weights["gn.weight"], weights["gn.bias"])
      config = ft.config_pbtxt(name, ft.FAMILY_GROUPNORM, max_batch, dims, dims,
                               {"num_channels": channels, "num_groups": groups},
                               dynamic_batching=batching)
      ft.add_model(repository, name, config, weights)
    ft.add_model(repository, "gemm", ft.config_pbtxt(
        "gemm", ft.FAMILY_GEMM, 4, [8], [12],
        {"in_features": 8, "out_features": 12, "num_groups": 3}), gemm_weights(rng, 8, 12))
    ft.add_model(repository, "conv", ft.config_pbtxt(
        "conv", ft.FAMILY_CONV, 2, [3, -1, -1], [4, -1, -1],
        {"in_channels": 3, "out_channels": 4, "kernel_size": 3, "num_groups": 2}),
        conv_weights(rng, 3, 4, 3))
    cls.model_names = sorted(list(groupnorms) + ["gemm", "conv"])

  # Helpers -------------------------------------------------------------

  def reference(self, model, x):
    groups, weight, bias = self.weights[model]
    return groupnorm_reference(x, groups, weight, bias)

  def assert_matches_reference(self, model, x, y):
    problem = ft.accuracy_problem(y, self.reference(model, x), "fp32")
    self.assertIsNone(problem, "%s: %s" % (model, problem))

  def assert_still_serving(self):
    """A valid request still succeeds (after an error)."""
    x = np.random.default_rng(5).random((2, 4, 5), dtype=np.float32)
    try:
      y, _ = ft.infer(self.stub, "gn_batch", x, request_id="after-error")
    except ft.grpc.RpcError as e:
      self.fail("server stopped serving after an error: %s %s\n%s" % (
          e.code(), e.details(), self.server_output()))
    self.assert_matches_reference("gn_batch", x, y)

  def assert_infer_rejected(self, request, code, needles=()):
    details = self.assert_rpc_error(self.stub.ModelInfer, request, code, needles)
    self.assert_still_serving()
    return details

  def valid_request(self, shape=(2, 4, 5), model="gn_batch"):
    x = np.random.default_rng(11).random(shape, dtype=np.float32)
    return ft.infer_request(model, x, request_id="bad")

  # Health and metadata -------------------------------------------------

  def test_server_is_live_and_ready(self):
    self.assertTrue(self.stub.ServerLive(self.p.service.ServerLiveRequest(), timeout=30).live)
    self.assertTrue(self.stub.ServerReady(self.p.service.ServerReadyRequest(), timeout=30).ready)

  def test_every_model_is_ready_with_and_without_version(self):
    for name in self.model_names:
      for version in ("", "1"):
        with self.subTest(model=name, version=version):
          response = self.stub.ModelReady(
              self.p.service.ModelReadyRequest(name=name, version=version), timeout=30)
          self.assertTrue(response.ready)

  def test_health_check_reports_serving(self):
    health = self.p.health
    response = self.health_stub.Check(health.HealthCheckRequest(service=""), timeout=30)
    self.assertEqual(response.status, health.HealthCheckResponse.SERVING)

  def test_server_metadata_lists_model_configuration_and_statistics(self):
    response = self.stub.ServerMetadata(self.p.service.ServerMetadataRequest(), timeout=30)
    self.assertTrue(response.name)
    self.assertTrue(response.version)
    self.assertIn("model_configuration", response.extensions)
    self.assertIn("statistics", response.extensions)

  def test_model_metadata_prepends_variable_batch_dimension_when_batching(self):
    response = self.stub.ModelMetadata(self.p.service.ModelMetadataRequest(name="gn_batch"),
                                       timeout=30)
    self.assertEqual(response.name, "gn_batch")
    self.assertEqual(response.platform, ft.FAMILY_GROUPNORM)
    self.assertEqual(list(response.versions), ["1"])
    for tensors, name in ((response.inputs, "input"), (response.outputs, "output")):
      self.assertEqual(len(tensors), 1)
      self.assertEqual(tensors[0].name, name)
      self.assertEqual(tensors[0].datatype, "FP32")
      self.assertEqual(list(tensors[0].shape), [-1, 4, -1])

  def test_model_metadata_uses_config_dims_without_batching(self):
    response = self.stub.ModelMetadata(self.p.service.ModelMetadataRequest(name="gn_fixed"),
                                       timeout=30)
    self.assertEqual(list(response.inputs[0].shape), [2, 2, 3])
    self.assertEqual(list(response.outputs[0].shape), [2, 2, 3])

  def test_model_metadata_reports_each_family_as_platform(self):
    for name, family in (("gemm", ft.FAMILY_GEMM), ("conv", ft.FAMILY_CONV)):
      with self.subTest(model=name):
        response = self.stub.ModelMetadata(self.p.service.ModelMetadataRequest(name=name),
                                           timeout=30)
        self.assertEqual(response.platform, family)
    conv = self.stub.ModelMetadata(self.p.service.ModelMetadataRequest(name="conv"), timeout=30)
    self.assertEqual(list(conv.inputs[0].shape), [-1, 3, -1, -1])
    self.assertEqual(list(conv.outputs[0].shape), [-1, 4, -1, -1])

  def test_model_metadata_reports_the_chosen_precision(self):
    # SPEC.md §1.4: reported in config and metadata (OIP's `properties`).
    for name, precision in (("conv", "tf32"), ("gemm", "fp32"), ("gn_batch", "fp32")):
      with self.subTest(model=name):
        response = self.stub.ModelMetadata(self.p.service.ModelMetadataRequest(name=name),
                                           timeout=30)
        self.assertEqual(response.properties["precision"], precision)

  def test_model_metadata_of_unknown_model_is_not_found(self):
    self.assert_rpc_error(self.stub.ModelMetadata,
                          self.p.service.ModelMetadataRequest(name="no_such_model"),
                          ft.grpc.StatusCode.NOT_FOUND, ["no_such_model"])

  def test_model_config_returns_the_configuration_and_default_precision(self):
    config = self.stub.ModelConfig(self.p.service.ModelConfigRequest(name="conv"),
                                   timeout=30).config
    self.assertEqual(config.name, "conv")
    self.assertEqual(config.platform, ft.FAMILY_CONV)
    self.assertEqual(config.max_batch_size, 2)
    self.assertEqual(len(config.input), 1)
    self.assertEqual(config.input[0].name, "input")
    self.assertEqual(config.input[0].data_type, self.p.config.TYPE_FP32)
    self.assertEqual(list(config.input[0].dims), [3, -1, -1])
    self.assertEqual(len(config.output), 1)
    self.assertEqual(config.output[0].name, "output")
    self.assertEqual(list(config.output[0].dims), [4, -1, -1])
    self.assertEqual(config.parameters["in_channels"].string_value, "3")
    self.assertEqual(config.parameters["kernel_size"].string_value, "3")
    # SPEC.md §1.4: the transposed convolution defaults to tf32, the GEMM
    # family and groupnorm to fp32, and the chosen precision is reported.
    self.assertEqual(config.parameters["precision"].string_value, "tf32")
    for name in ("gemm", "gn_batch"):
      with self.subTest(model=name):
        other = self.stub.ModelConfig(self.p.service.ModelConfigRequest(name=name),
                                      timeout=30).config
        self.assertEqual(other.parameters["precision"].string_value, "fp32")

  def test_model_config_of_unknown_model_is_not_found(self):
    self.assert_rpc_error(self.stub.ModelConfig,
                          self.p.service.ModelConfigRequest(name="no_such_model"),
                          ft.grpc.StatusCode.NOT_FOUND)

  def test_repository_index_lists_every_model_ready(self):
    response = self.stub.RepositoryIndex(self.p.service.RepositoryIndexRequest(), timeout=30)
    states = {m.name: m.state for m in response.models}
    for name in self.model_names:
      self.assertEqual(states.get(name), "READY", "%s in %s" % (name, states))

  # Inference -------------------------------------------------------------

  def test_infer_echoes_id_and_returns_one_raw_output_per_output(self):
    x = np.random.default_rng(1).standard_normal((3, 4, 7)).astype(np.float32)
    response = self.stub.ModelInfer(ft.infer_request("gn_batch", x, request_id="req-42"),
                                    timeout=60)
    self.assertEqual(response.id, "req-42")
    self.assertEqual(response.model_name, "gn_batch")
    self.assertEqual(len(response.outputs), 1)
    self.assertEqual(len(response.raw_output_contents), 1)
    self.assertEqual(response.outputs[0].name, "output")
    self.assertEqual(response.outputs[0].datatype, "FP32")
    self.assertEqual(list(response.outputs[0].shape), [3, 4, 7])
    self.assertEqual(len(response.outputs[0].contents.fp32_contents), 0)
    self.assert_matches_reference("gn_batch", x, ft.decode_output(response))

  def test_infer_without_requested_outputs_returns_every_output(self):
    x = np.random.default_rng(2).random((2, 2, 3), dtype=np.float32)
    response = self.stub.ModelInfer(
        ft.infer_request("gn_fixed", x, request_id="all", output_names=()), timeout=60)
    self.assertEqual([o.name for o in response.outputs], ["output"])
    self.assertEqual(len(response.raw_output_contents), 1)
    self.assert_matches_reference("gn_fixed", x, ft.decode_output(response))

  def test_typed_fp32_contents_give_the_same_answer_as_raw(self):
    x = np.random.default_rng(3).standard_normal((2, 4, 6)).astype(np.float32)
    raw = self.stub.ModelInfer(ft.infer_request("gn_batch", x, request_id="raw"), timeout=60)
    typed_request = ft.infer_request("gn_batch", x, request_id="typed")
    del typed_request.raw_input_contents[:]
    typed_request.inputs[0].contents.fp32_contents.extend(x.ravel().tolist())
    typed = self.stub.ModelInfer(typed_request, timeout=60)
    self.assertEqual(typed.id, "typed")
    self.assertEqual(len(typed.raw_output_contents), 1)
    np.testing.assert_array_equal(ft.decode_output(typed), ft.decode_output(raw))
    self.assert_matches_reference("gn_batch", x, ft.decode_output(typed))

  def test_infer_accepts_explicit_version(self):
    x = np.random.default_rng(4).random((1, 4, 3), dtype=np.float32)
    y, response = ft.infer(self.stub, "gn_batch", x,
                           request_id="v1", model_version="1")
    self.assertEqual(response.id, "v1")
    self.assert_matches_reference("gn_batch", x, y)

  def test_tritonclient_scheduling_parameters_are_accepted(self):
    # tritonclient sends priority as uint64_param and timeout (us) as
    # int64_param (REFERENCE.md §1.6, item 5).
    x = np.random.default_rng(12).random((1, 4, 2), dtype=np.float32)
    request = ft.infer_request("gn_batch", x, request_id="params")
    request.parameters["priority"].uint64_param = 1
    request.parameters["timeout"].int64_param = 60_000_000
    response = self.stub.ModelInfer(request, timeout=60)
    self.assertEqual(response.id, "params")
    self.assert_matches_reference("gn_batch", x, ft.decode_output(response))

  def test_tensors_larger_than_grpc_default_4mib_limit_round_trip(self):
    x = np.random.default_rng(6).standard_normal((1, 4, 600_000)).astype(np.float32)
    y, _ = ft.infer(self.stub, "gn_large", x, request_id="large")
    self.assert_matches_reference("gn_large", x, y)

  def test_concurrent_requests_each_get_their_own_answer(self):
    rng = np.random.default_rng(7)
    inputs = [rng.standard_normal((1 + i % 3, 4, 5)).astype(np.float32) for i in range(6)]
    futures = [self.stub.ModelInfer.future(
        ft.infer_request("gn_batch", x, request_id="c%d" % i), timeout=60)
        for i, x in enumerate(inputs)]
    for i, (x, future) in enumerate(zip(inputs, futures)):
      response = future.result()
      self.assertEqual(response.id, "c%d" % i)
      self.assert_matches_reference("gn_batch", x, ft.decode_output(response))

  def test_other_families_answer_with_their_output_shapes(self):
    x = np.random.default_rng(8).random((3, 8), dtype=np.float32)
    y, _ = ft.infer(self.stub, "gemm", x)
    self.assertEqual(list(y.shape), [3, 12])
    self.assertTrue(np.all(np.isfinite(y)))
    x = np.random.default_rng(9).random((2, 3, 4, 5), dtype=np.float32)
    y, _ = ft.infer(self.stub, "conv", x)
    self.assertEqual(list(y.shape), [2, 4, 6, 7])
    self.assertTrue(np.all(np.isfinite(y)))

  # Statistics --------------------------------------------------------------

  def test_statistics_count_requests_and_batched_inferences(self):
    rng = np.random.default_rng(10)
    batch_sizes = [1, 3, 2]
    for b in batch_sizes:
      ft.infer(self.stub, "gn_stats", rng.random((b, 4, 3), dtype=np.float32))
    response = self.stub.ModelStatistics(self.p.service.ModelStatisticsRequest(name="gn_stats"),
                                         timeout=30)
    self.assertEqual(len(response.model_stats), 1)
    stats = response.model_stats[0]
    self.assertEqual(stats.name, "gn_stats")
    self.assertEqual(stats.version, "1")
    self.assertEqual(stats.inference_count, sum(batch_sizes))
    # No dynamic_batching: every request executes alone.
    self.assertEqual(stats.execution_count, len(batch_sizes))
    self.assertEqual(stats.inference_stats.success.count, len(batch_sizes))
    self.assertGreater(stats.inference_stats.success.ns, 0)
    self.assertGreater(stats.last_inference, 0)

  def test_statistics_without_name_cover_every_model(self):
    response = self.stub.ModelStatistics(self.p.service.ModelStatisticsRequest(), timeout=30)
    self.assertEqual(sorted({s.name for s in response.model_stats}), self.model_names)

  def test_statistics_of_unknown_model_are_not_found(self):
    self.assert_rpc_error(self.stub.ModelStatistics,
                          self.p.service.ModelStatisticsRequest(name="no_such_model"),
                          ft.grpc.StatusCode.NOT_FOUND)

  # Malformed requests -----------------------------------------------------

  def test_unknown_model_is_not_found(self):
    request = self.valid_request()
    request.model_name = "no_such_model"
    self.assert_infer_rejected(request, ft.grpc.StatusCode.NOT_FOUND, ["no_such_model"])

  def test_unknown_version_is_not_found(self):
    request = self.valid_request()
    request.model_version = "7"
    self.assert_infer_rejected(request, ft.grpc.StatusCode.NOT_FOUND)

  def test_wrong_input_name_is_invalid_argument(self):
    request = self.valid_request()
    request.inputs[0].name = "inputz"
    self.assert_infer_rejected(request, ft.grpc.StatusCode.INVALID_ARGUMENT, ["inputz"])

  def test_wrong_datatype_is_invalid_argument(self):
    request = self.valid_request()
    request.inputs[0].datatype = "FP64"
    request.raw_input_contents[0] = np.zeros((2, 4, 5), dtype="<f8").tobytes()
    self.assert_infer_rejected(request, ft.grpc.StatusCode.INVALID_ARGUMENT, ["FP64"])

  def test_wrong_channel_count_is_invalid_argument(self):
    request = self.valid_request(shape=(2, 5, 6))
    self.assert_infer_rejected(request, ft.grpc.StatusCode.INVALID_ARGUMENT,
                               [("shape", "dim", "channel")])

  def test_wrong_rank_is_invalid_argument(self):
    request = self.valid_request(shape=(2, 4, 5, 1))
    self.assert_infer_rejected(request, ft.grpc.StatusCode.INVALID_ARGUMENT,
                               [("shape", "dim", "rank")])

  def test_wrong_fixed_shape_without_batching_is_invalid_argument(self):
    request = self.valid_request(shape=(2, 2, 4), model="gn_fixed")
    self.assert_infer_rejected(request, ft.grpc.StatusCode.INVALID_ARGUMENT,
                               [("shape", "dim")])

  def test_negative_dimension_is_invalid_argument(self):
    request = self.valid_request()
    request.inputs[0].shape[2] = -5
    self.assert_infer_rejected(request, ft.grpc.StatusCode.INVALID_ARGUMENT)

  def test_byte_count_mismatch_is_invalid_argument(self):
    request = self.valid_request()
    request.raw_input_contents[0] = request.raw_input_contents[0][:-4]
    self.assert_infer_rejected(request, ft.grpc.StatusCode.INVALID_ARGUMENT,
                               [("byte", "size")])

  def test_batch_above_max_batch_size_is_invalid_argument(self):
    request = self.valid_request(shape=(9, 4, 5))
    self.assert_infer_rejected(request, ft.grpc.StatusCode.INVALID_ARGUMENT, ["batch"])

  def test_raw_and_typed_contents_mixed_is_invalid_argument(self):
    request = self.valid_request()
    request.inputs[0].contents.fp32_contents.extend([0.0] * 40)
    self.assert_infer_rejected(request, ft.grpc.StatusCode.INVALID_ARGUMENT,
                               [("raw", "contents")])

  def test_typed_contents_with_wrong_element_count_is_invalid_argument(self):
    request = self.valid_request()
    del request.raw_input_contents[:]
    request.inputs[0].contents.fp32_contents.extend([0.5] * 39)
    self.assert_infer_rejected(request, ft.grpc.StatusCode.INVALID_ARGUMENT)

  def test_more_raw_contents_than_inputs_is_invalid_argument(self):
    request = self.valid_request()
    request.raw_input_contents.append(request.raw_input_contents[0])
    self.assert_infer_rejected(request, ft.grpc.StatusCode.INVALID_ARGUMENT)

  def test_missing_input_is_invalid_argument(self):
    request = self.valid_request()
    del request.inputs[:]
    del request.raw_input_contents[:]
    self.assert_infer_rejected(request, ft.grpc.StatusCode.INVALID_ARGUMENT, ["input"])

  def test_unknown_requested_output_is_invalid_argument(self):
    request = self.valid_request()
    request.outputs[0].name = "outputz"
    self.assert_infer_rejected(request, ft.grpc.StatusCode.INVALID_ARGUMENT, ["outputz"])


@unittest.skipIf(_MISSING, _SKIP_REASON)
class BrokenModelTest(RpcAssertions, ft.ServerTestCase):
  """A model whose weights contradict its config fails alone (SPEC.md §2)."""

  # Readiness with a failed model is not what these tests are about.
  expect_ready = False

  # name -> the tensor its load failure must name.
  broken = {
      "missing_tensor": "groupnorm.weight",
      "wrong_shape": "conv_transpose.weight",
      "wrong_dtype": "gn.weight",
  }

  @classmethod
  def populate_repository(cls, repository):
    rng = np.random.default_rng(99)
    weights = random_groupnorm_weights(rng, 4)
    cls.good_weights = weights
    ft.add_model(repository, "good", ft.config_pbtxt(
        "good", ft.FAMILY_GROUPNORM, 4, [4, -1], [4, -1],
        {"num_channels": 4, "num_groups": 2}), weights)

    missing = gemm_weights(rng, 8, 12)
    del missing["groupnorm.weight"]
    ft.add_model(repository, "missing_tensor", ft.config_pbtxt(
        "missing_tensor", ft.FAMILY_GEMM, 4, [8], [12],
        {"in_features": 8, "out_features": 12, "num_groups": 3}), missing)

    ft.add_model(repository, "wrong_shape", ft.config_pbtxt(
        "wrong_shape", ft.FAMILY_CONV, 2, [3, -1, -1], [4, -1, -1],
        {"in_channels": 3, "out_channels": 4, "kernel_size": 3, "num_groups": 2}),
        conv_weights(rng, 3, 4, 2))

    wrong_dtype = random_groupnorm_weights(rng, 4)
    wrong_dtype["gn.weight"] = wrong_dtype["gn.weight"].astype(np.float64)
    ft.add_model(repository, "wrong_dtype", ft.config_pbtxt(
        "wrong_dtype", ft.FAMILY_GROUPNORM, 4, [4, -1], [4, -1],
        {"num_channels": 4, "num_groups": 2}), wrong_dtype)

  def test_server_is_live(self):
    self.assertTrue(self.stub.ServerLive(self.p.service.ServerLiveRequest(), timeout=30).live)

  def test_broken_models_are_not_ready_and_good_one_is(self):
    ready = self.stub.ModelReady(self.p.service.ModelReadyRequest(name="good"), timeout=30)
    self.assertTrue(ready.ready)
    for name in self.broken:
      with self.subTest(model=name):
        ready = self.stub.ModelReady(self.p.service.ModelReadyRequest(name=name), timeout=30)
        self.assertFalse(ready.ready)

  def test_repository_index_names_the_offending_tensor(self):
    response = self.stub.RepositoryIndex(self.p.service.RepositoryIndexRequest(), timeout=30)
    models = {m.name: m for m in response.models}
    self.assertEqual(models["good"].state, "READY")
    for name, tensor in self.broken.items():
      with self.subTest(model=name):
        self.assertIn(name, models)
        self.assertEqual(models[name].state, "UNAVAILABLE")
        self.assertIn(tensor, models[name].reason)

  def test_good_model_serves(self):
    x = np.random.default_rng(1).random((2, 4, 3), dtype=np.float32)
    y, _ = ft.infer(self.stub, "good", x)
    reference = groupnorm_reference(x, 2, self.good_weights["gn.weight"],
                                    self.good_weights["gn.bias"])
    self.assertIsNone(ft.accuracy_problem(y, reference, "fp32"))

  def test_infer_on_broken_model_is_unavailable(self):
    x = np.zeros((1, 8), dtype=np.float32)
    self.assert_rpc_error(self.stub.ModelInfer, ft.infer_request("missing_tensor", x),
                          ft.grpc.StatusCode.UNAVAILABLE)


if __name__ == "__main__":
  ft.run_tests()
