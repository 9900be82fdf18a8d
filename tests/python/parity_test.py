#!/usr/bin/python3
"""PyTorch parity: fuseserve answers what the user's own nn.Module computes.

Each family (SPEC.md §1) is built as a real nn.Module whose attribute names
give the state_dict names the server reads, with random weights (GroupNorm
affine parameters included) and non-default hyper-parameters. Its state_dict
is exported to safetensors beside a config.pbtxt, all models are served by
one fuseserve process, and every gRPC answer is compared with the same module
run in float64 on the same inputs, on U[0,1) and N(0,1) inputs, under the
accuracy contract of SPEC.md §1.4.

Tolerance per model: a model that runs on the CPU backend (pinned to KIND_CPU,
or reported with metadata property device "cpu") must meet fp32 whatever its
precision, since the CPU backend computes float32 for both precisions;
otherwise the model must meet the tolerance of the precision it reports in
ModelConfig.
"""

import copy
import os
import re
import sys
import unittest

# Keeps the source tree free of __pycache__ (the helpers are imported from it).
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fuseserve_testing as ft  # noqa: E402

if ft.HAVE_TORCH:
  import numpy as np
  import torch
  from torch import nn
  import torch.nn.functional as F

  class ConvTransposeGeluGroupNorm(nn.Module):
    """SPEC.md §1.1."""

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding,
                 output_padding, num_groups, eps):
      super().__init__()
      self.conv_transpose = nn.ConvTranspose2d(
          in_channels, out_channels, kernel_size, stride=stride, padding=padding,
          output_padding=output_padding, bias=True)
      self.group_norm = nn.GroupNorm(num_groups, out_channels, eps=eps)

    def forward(self, x):
      return self.group_norm(F.gelu(self.conv_transpose(x)))

  class GemmBiasHardtanhMishGroupNorm(nn.Module):
    """SPEC.md §1.2."""

    def __init__(self, in_features, out_features, num_groups, hardtanh_min,
                 hardtanh_max, eps):
      super().__init__()
      self.gemm = nn.Linear(in_features, out_features)
      self.bias = nn.Parameter(torch.randn(out_features))
      self.hardtanh = nn.Hardtanh(min_val=hardtanh_min, max_val=hardtanh_max)
      self.mish = nn.Mish()
      self.groupnorm = nn.GroupNorm(num_groups, out_features, eps=eps)

    def forward(self, x):
      return self.groupnorm(self.mish(self.hardtanh(self.gemm(x) + self.bias)))

  class GroupNormModel(nn.Module):
    """SPEC.md §1.3."""

    def __init__(self, num_channels, num_groups, eps):
      super().__init__()
      self.gn = nn.GroupNorm(num_groups, num_channels, eps=eps)

    def forward(self, x):
      return self.gn(x)


DEFAULT_EPS = 1e-5

# Where the float64 reference modules run: "cpu" (default; Debian's CPU
# PyTorch in CI) or "cuda" (PyTorch CUDA on a GPU host, scripts/gpu/run.sh).
REFERENCE_DEVICE = os.environ.get("FUSESERVE_REFERENCE_DEVICE", "cpu")


class Case:
  """One served model: its module, config and the input shapes sent to it.

  input_dims / output_dims are the config's dims (batch excluded when
  max_batch_size > 0, -1 for a variable dimension); request_shapes are the
  full shapes of the tensors sent (batch included when batching).
  parameters holds only the keys written to config.pbtxt, so a key left out
  exercises the server's default.
  """

  def __init__(self, name, family, parameters, max_batch_size, input_dims, output_dims,
               request_shapes, instance_kind=None, dynamic_batching=None):
    self.name = name
    self.family = family
    self.parameters = parameters
    self.max_batch_size = max_batch_size
    self.input_dims = input_dims
    self.output_dims = output_dims
    self.request_shapes = request_shapes
    self.instance_kind = instance_kind
    self.dynamic_batching = dynamic_batching
    self.module = None


def conv_output_size(size, kernel_size, stride=1, padding=0, output_padding=0):
  return (size - 1) * stride - 2 * padding + (kernel_size - 1) + output_padding + 1


def conv_case(name, cin, cout, k, groups, hw, max_batch_size, batches=(), stride=None,
              padding=None, output_padding=None, eps=None, precision=None,
              variable_spatial=False, extra_hw=(), instance_kind=None, dynamic_batching=None):
  """A convtranspose_gelu_groupnorm case. None hyper-parameters are left out of
  the config (server default) and take PyTorch's default in the module."""
  parameters = {"in_channels": cin, "out_channels": cout, "kernel_size": k,
                "num_groups": groups}
  for key, value in (("stride", stride), ("padding", padding),
                     ("output_padding", output_padding), ("eps", eps),
                     ("precision", precision)):
    if value is not None:
      parameters[key] = value
  geometry = dict(kernel_size=k, stride=stride or 1, padding=padding or 0,
                  output_padding=output_padding or 0)
  h, w = hw
  out_hw = [conv_output_size(h, **geometry), conv_output_size(w, **geometry)]
  if variable_spatial:
    input_dims, output_dims = [cin, -1, -1], [cout, -1, -1]
  else:
    input_dims, output_dims = [cin, h, w], [cout] + out_hw
  if max_batch_size > 0:
    shapes = [[b, cin, h, w] for b in batches]
    shapes += [[batches[0], cin, eh, ew] for eh, ew in extra_hw]
  else:
    n = batches[0]
    input_dims, output_dims = [n] + input_dims, [n] + output_dims
    shapes = [[n, cin, h, w]]
  return Case(name, ft.FAMILY_CONV, parameters, max_batch_size, input_dims, output_dims, shapes,
              instance_kind, dynamic_batching)


def gemm_case(name, fin, fout, groups, max_batch_size, batches, hardtanh_min=None,
              hardtanh_max=None, eps=None, precision=None, instance_kind=None,
              dynamic_batching=None):
  parameters = {"in_features": fin, "out_features": fout, "num_groups": groups}
  for key, value in (("hardtanh_min", hardtanh_min), ("hardtanh_max", hardtanh_max),
                     ("eps", eps), ("precision", precision)):
    if value is not None:
      parameters[key] = value
  if max_batch_size > 0:
    input_dims, output_dims = [fin], [fout]
    shapes = [[b, fin] for b in batches]
  else:
    input_dims, output_dims = [batches[0], fin], [batches[0], fout]
    shapes = [[batches[0], fin]]
  return Case(name, ft.FAMILY_GEMM, parameters, max_batch_size, input_dims, output_dims, shapes,
              instance_kind, dynamic_batching)


def groupnorm_case(name, channels, groups, max_batch_size, input_dims, request_shapes, eps=None,
                   instance_kind=None, dynamic_batching=None):
  parameters = {"num_channels": channels, "num_groups": groups}
  if eps is not None:
    parameters["eps"] = eps
  return Case(name, ft.FAMILY_GROUPNORM, parameters, max_batch_size, input_dims,
              list(input_dims), request_shapes, instance_kind, dynamic_batching)


def all_cases():
  batching = {"max_queue_delay_microseconds": 2000}
  return [
      # convtranspose_gelu_groupnorm
      conv_case("conv_defaults_batched", 3, 4, 3, 2, (5, 5), 4, batches=(1, 3)),
      conv_case("conv_stride2_pad1_outpad1_odd_variable_hw", 4, 6, 3, 3, (7, 5), 8,
                batches=(2,), stride=2, padding=1, output_padding=1, variable_spatial=True,
                extra_hw=((3, 9), (1, 1)), dynamic_batching=batching),
      conv_case("conv_kernel4_stride2_one_channel_per_group_unbatched", 2, 8, 4, 8, (6, 5), 0,
                batches=(2,), stride=2, padding=1),
      conv_case("conv_kernel1_single_group_eps1e-3", 5, 4, 1, 1, (4, 6), 2, batches=(2, 1),
                eps=1e-3),
      conv_case("conv_kernel5_stride3_pad2_outpad2_odd_hw", 3, 6, 5, 2, (4, 3), 4,
                batches=(1, 4), stride=3, padding=2, output_padding=2),
      conv_case("conv_tf32_pinned_to_cpu_meets_fp32", 8, 8, 3, 4, (6, 6), 4, batches=(2,),
                padding=1, precision="tf32", instance_kind="KIND_CPU"),
      conv_case("conv_explicit_tf32_stride2", 6, 4, 3, 2, (5, 4), 4, batches=(3,), stride=2,
                precision="tf32"),
      conv_case("conv_kernel2_one_pixel_unbatched", 1, 2, 2, 1, (1, 1), 0, batches=(1,)),
      conv_case("conv_stride2_outpad1_groups6_unbatched", 6, 12, 3, 6, (4, 4), 0, batches=(3,),
                stride=2, output_padding=1),
      conv_case("conv_pad2_shrinks_output_eps1e-6", 16, 8, 3, 2, (6, 6), 16, batches=(5,),
                padding=2, eps=1e-6),
      conv_case("conv_stride4_outpad3_odd_hw", 4, 4, 3, 2, (3, 2), 2, batches=(2,), stride=4,
                output_padding=3),
      conv_case("conv_explicit_fp32_variable_odd_hw", 7, 5, 3, 5, (9, 11), 4, batches=(4,),
                stride=2, padding=1, output_padding=1, precision="fp32", variable_spatial=True,
                extra_hw=((2, 3),), dynamic_batching=batching),
      # gemm_bias_hardtanh_mish_groupnorm
      gemm_case("gemm_defaults_batched", 8, 16, 4, 8, (1, 5)),
      gemm_case("gemm_hardtanh_half_unbatched", 17, 12, 3, 0, (6,), hardtanh_min=-0.5,
                hardtanh_max=0.5),
      gemm_case("gemm_two_channels_per_group_full_batch", 32, 32, 16, 4, (4, 1)),
      gemm_case("gemm_single_group_wide_bounds_eps1e-3", 5, 8, 1, 4, (3,), hardtanh_min=-2.0,
                hardtanh_max=3.0, eps=1e-3),
      gemm_case("gemm_eps1e-6_batch16", 64, 48, 6, 16, (16, 2), eps=1e-6,
                dynamic_batching=batching),
      gemm_case("gemm_one_input_feature", 1, 4, 2, 2, (2,)),
      gemm_case("gemm_relu6_bounds_odd_sizes", 13, 26, 13, 8, (7,), hardtanh_min=0.0,
                hardtanh_max=6.0),
      gemm_case("gemm_many_inputs_few_outputs_unbatched", 100, 10, 5, 0, (3,)),
      gemm_case("gemm_explicit_fp32_asymmetric_bounds", 40, 24, 4, 32, (7, 1),
                hardtanh_min=-0.25, hardtanh_max=0.75, precision="fp32"),
      gemm_case("gemm_negative_bounds", 3, 9, 3, 4, (2,), hardtanh_min=-3.0, hardtanh_max=-1.0),
      gemm_case("gemm_tf32_pinned_to_cpu_meets_fp32", 24, 40, 8, 4, (3,), precision="tf32",
                instance_kind="KIND_CPU"),
      # groupnorm
      groupnorm_case("groupnorm_rank3_variable_length", 6, 3, 4, [6, -1],
                     [[2, 6, 10], [1, 6, 1], [3, 6, 7]], dynamic_batching=batching),
      groupnorm_case("groupnorm_rank5", 4, 2, 4, [4, 3, 4, 5], [[2, 4, 3, 4, 5], [1, 4, 3, 4, 5]]),
      groupnorm_case("groupnorm_rank2", 8, 4, 8, [8], [[3, 8], [8, 8]]),
      groupnorm_case("groupnorm_instance_norm_eps1e-3_unbatched", 6, 6, 0, [2, 6, 5, 7],
                     [[2, 6, 5, 7]], eps=1e-3),
      groupnorm_case("groupnorm_single_group_variable_hw", 5, 1, 2, [5, -1, -1],
                     [[1, 5, 9, 9], [2, 5, 3, 11]]),
      groupnorm_case("groupnorm_rank5_unbatched", 4, 4, 0, [3, 4, 2, 3, 4], [[3, 4, 2, 3, 4]]),
      groupnorm_case("groupnorm_rank3_length1", 16, 8, 4, [16, 1], [[4, 16, 1]]),
      groupnorm_case("groupnorm_rank6", 4, 2, 2, [4, 2, 2, 2, 3], [[2, 4, 2, 2, 2, 3]]),
      groupnorm_case("groupnorm_eps0.1_batch5", 12, 3, 8, [12, 4, 4], [[5, 12, 4, 4]], eps=0.1),
      groupnorm_case("groupnorm_one_element_per_group", 3, 3, 0, [4, 3, 1, 1], [[4, 3, 1, 1]]),
      groupnorm_case("groupnorm_variable_batch_unbatched", 6, 2, 0, [-1, 6, -1],
                     [[1, 6, 5], [3, 6, 2]]),
      groupnorm_case("groupnorm_larger_spatial", 32, 8, 2, [32, 16, 16], [[2, 32, 16, 16]]),
  ]


def build_module(case, seed):
  """The case's nn.Module with random weights, deterministically from `seed`."""
  torch.manual_seed(seed)
  p = case.parameters
  eps = float(p.get("eps", DEFAULT_EPS))
  if case.family == ft.FAMILY_CONV:
    module = ConvTransposeGeluGroupNorm(
        p["in_channels"], p["out_channels"], p["kernel_size"], p.get("stride", 1),
        p.get("padding", 0), p.get("output_padding", 0), p["num_groups"], eps)
    norm = module.group_norm
  elif case.family == ft.FAMILY_GEMM:
    module = GemmBiasHardtanhMishGroupNorm(
        p["in_features"], p["out_features"], p["num_groups"],
        float(p.get("hardtanh_min", -1.0)), float(p.get("hardtanh_max", 1.0)), eps)
    norm = module.groupnorm
  else:
    module = GroupNormModel(p["num_channels"], p["num_groups"], eps)
    norm = module.gn
  # Random affine parameters: the 1/0 defaults would hide a swapped or
  # misindexed weight/bias.
  with torch.no_grad():
    norm.weight.copy_(torch.randn_like(norm.weight))
    norm.bias.copy_(torch.randn_like(norm.bias))
  return module.eval()


def make_input(shape, distribution, seed):
  generator = torch.Generator().manual_seed(seed)
  if distribution == "uniform":
    return torch.rand(shape, generator=generator, dtype=torch.float32)
  return torch.randn(shape, generator=generator, dtype=torch.float32)


@unittest.skipIf(ft.missing_dependencies(need_torch=True),
                 "needs " + ", ".join(ft.missing_dependencies(need_torch=True)) +
                 " in " + sys.executable)
class PyTorchParityTest(ft.ServerTestCase):
  """All cases served by one fuseserve process."""

  cases = {}

  @classmethod
  def populate_repository(cls, repository):
    for index, case in enumerate(all_cases()):
      case.module = build_module(case, seed=1000 + index)
      config = ft.config_pbtxt(case.name, case.family, case.max_batch_size, case.input_dims,
                               case.output_dims, case.parameters,
                               dynamic_batching=case.dynamic_batching,
                               instance_kind=case.instance_kind)
      ft.add_model(repository, case.name, config, case.module.state_dict())
      cls.cases[case.name] = case

  def expected_precision(self, case):
    """The tolerance this model must meet (see the module docstring), after
    checking that the server reports the configured (or default) precision."""
    response = self.stub.ModelConfig(self.p.service.ModelConfigRequest(name=case.name),
                                     timeout=30)
    reported = response.config.parameters["precision"].string_value
    if case.family != ft.FAMILY_GROUPNORM:
      configured = case.parameters.get("precision",
                                       "tf32" if case.family == ft.FAMILY_CONV else "fp32")
      self.assertEqual(reported, configured,
                       "%s: ModelConfig reports precision %r, configured/default %r" %
                       (case.name, reported, configured))
    if case.instance_kind == "KIND_CPU":
      return "fp32"
    metadata = self.stub.ModelMetadata(self.p.service.ModelMetadataRequest(name=case.name),
                                       timeout=30)
    if metadata.properties.get("device", "").lower() == "cpu":
      return "fp32"
    self.assertIn(reported, ft.TOLERANCES, "%s: unknown reported precision" % case.name)
    return reported

  def check_case(self, name):
    case = self.cases[name]
    precision = self.expected_precision(case)
    reference_module = copy.deepcopy(case.module).double().to(REFERENCE_DEVICE)
    for shape_index, shape in enumerate(case.request_shapes):
      for dist_index, distribution in enumerate(("uniform", "normal")):
        with self.subTest(shape=shape, inputs=distribution):
          x = make_input(shape, distribution, seed=7919 * shape_index + dist_index)
          with torch.no_grad():
            reference = reference_module(x.double().to(REFERENCE_DEVICE)).cpu().numpy()
          request_id = "%s/%d/%s" % (name, shape_index, distribution)
          try:
            y, response = ft.infer(self.stub, name, x.numpy(), request_id=request_id)
          except ft.grpc.RpcError as e:
            self.fail("%s %s input %s: %s %s" % (name, distribution, shape, e.code(),
                                                  e.details()))
          self.assertEqual(response.id, request_id)
          self.assertEqual(list(y.shape), list(reference.shape),
                           "%s: output shape for input %s" % (name, shape))
          problem = ft.accuracy_problem(y, reference, precision)
          self.assertIsNone(problem, "%s, %s input %s: %s" % (name, distribution, shape,
                                                            problem))

  def test_concurrent_requests_merged_by_the_batcher_match_the_module(self):
    """Requests of one non-batch shape sent together may be executed as one
    batch; each must still get exactly its own rows of the answer."""
    batched = [c for c in self.cases.values() if c.dynamic_batching and c.max_batch_size > 1]
    self.assertTrue(batched)
    for case in batched:
      with self.subTest(model=case.name):
        precision = self.expected_precision(case)
        reference_module = copy.deepcopy(case.module).double().to(REFERENCE_DEVICE)
        item_shape = case.request_shapes[0][1:]
        batch_sizes = [1, 2, 1, 3, 1][:case.max_batch_size]
        inputs = [make_input([b] + item_shape, "normal", seed=31 * i + 5)
                  for i, b in enumerate(batch_sizes)]
        futures = [self.stub.ModelInfer.future(
            ft.infer_request(case.name, x.numpy(), request_id="merge%d" % i), timeout=120)
            for i, x in enumerate(inputs)]
        for i, (x, future) in enumerate(zip(inputs, futures)):
          response = future.result()
          self.assertEqual(response.id, "merge%d" % i)
          with torch.no_grad():
            reference = reference_module(x.double().to(REFERENCE_DEVICE)).cpu().numpy()
          problem = ft.accuracy_problem(ft.decode_output(response), reference, precision)
          self.assertIsNone(problem, "%s request %d (batch %d): %s" % (
              case.name, i, batch_sizes[i], problem))


def _add_case_tests():
  """One test method per case, named after it, so a failure names the
  configuration."""
  for case in all_cases():
    def test(self, name=case.name):
      self.check_case(name)
    test.__doc__ = "gRPC answers of %s match its float64 PyTorch module" % case.name
    setattr(PyTorchParityTest, "test_" + re.sub(r"\W", "_", case.name), test)


_add_case_tests()


if __name__ == "__main__":
  ft.run_tests()
