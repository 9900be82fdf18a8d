#!/usr/bin/python3
"""Checks of the test helpers themselves (no server): the safetensors writer,
the generated stubs, config.pbtxt text, and the tritonclient-shaped request
and response handling that the end-to-end tests rely on."""

import json
import os
import shutil
import struct
import sys
import tempfile
import unittest

# Keeps the source tree free of __pycache__ (the helpers are imported from it).
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fuseserve_testing as ft  # noqa: E402

if ft.HAVE_NUMPY:
  import numpy as np

_MISSING = ft.missing_dependencies(need_torch=False)


@unittest.skipIf(_MISSING, "needs %s in %s" % (", ".join(_MISSING), sys.executable))
class FuseserveTestingTest(unittest.TestCase):

  def setUp(self):
    self.dir = tempfile.mkdtemp(prefix="fuseserve_testing_test_")
    self.addCleanup(shutil.rmtree, self.dir, True)

  def test_safetensors_layout_matches_the_format(self):
    tensors = {"b": np.arange(3, dtype=np.float32),
               "a.weight": np.arange(6, dtype=np.float64).reshape(2, 3)}
    image = ft.safetensors_bytes(tensors)
    (header_len,) = struct.unpack("<Q", image[:8])
    self.assertEqual(header_len % 8, 0)
    header = json.loads(image[8:8 + header_len])
    self.assertEqual(header["__metadata__"], {"format": "pt"})
    self.assertEqual(header["a.weight"],
                     {"dtype": "F64", "shape": [2, 3], "data_offsets": [0, 48]})
    self.assertEqual(header["b"], {"dtype": "F32", "shape": [3], "data_offsets": [48, 60]})
    self.assertEqual(len(image), 8 + header_len + 60)
    self.assertEqual(image[8 + header_len + 48:], np.arange(3, dtype="<f4").tobytes())

  def test_safetensors_round_trips_torch_state_dicts(self):
    if not ft.HAVE_TORCH:
      self.skipTest("needs torch")
    module = ft.torch.nn.GroupNorm(2, 4)
    path = os.path.join(self.dir, "m.safetensors")
    ft.write_safetensors(path, module.state_dict())
    back = ft.read_safetensors(path)
    self.assertEqual(sorted(back), ["bias", "weight"])
    for name, value in module.state_dict().items():
      np.testing.assert_array_equal(back[name], value.numpy())

  def test_config_pbtxt_parses_as_model_config(self):
    from google.protobuf import text_format
    p = ft.protos()
    text = ft.config_pbtxt("m", ft.FAMILY_GROUPNORM, 4, [6, -1], [6, -1],
                           {"num_channels": 6, "eps": 1e-6},
                           dynamic_batching={"max_queue_delay_microseconds": 100,
                                             "preferred_batch_size": [2, 4],
                                             "default_queue_policy": {"max_queue_size": 8}},
                           instance_kind="KIND_CPU", instance_count=2)
    config = text_format.Parse(text, p.config.ModelConfig())
    self.assertEqual(config.name, "m")
    self.assertEqual(config.platform, "groupnorm")
    self.assertEqual(config.max_batch_size, 4)
    self.assertEqual(list(config.input[0].dims), [6, -1])
    self.assertEqual(config.input[0].data_type, p.config.TYPE_FP32)
    self.assertEqual(config.output[0].name, "output")
    self.assertEqual(list(config.dynamic_batching.preferred_batch_size), [2, 4])
    self.assertEqual(config.dynamic_batching.default_queue_policy.max_queue_size, 8)
    self.assertEqual(config.instance_group[0].kind, p.config.ModelInstanceGroup.KIND_CPU)
    self.assertEqual(config.instance_group[0].count, 2)
    self.assertEqual(config.parameters["num_channels"].string_value, "6")
    self.assertEqual(float(config.parameters["eps"].string_value), 1e-6)

  def test_add_model_writes_triton_layout(self):
    ft.add_model(self.dir, "m", "name: \"m\"\n", {"w": np.zeros(2, np.float32)})
    self.assertTrue(os.path.isfile(os.path.join(self.dir, "m", "config.pbtxt")))
    self.assertTrue(os.path.isfile(os.path.join(self.dir, "m", "1", "model.safetensors")))

  def test_infer_request_carries_raw_little_endian_input(self):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    request = ft.infer_request("m", x, request_id="r1")
    self.assertEqual(request.model_name, "m")
    self.assertEqual(request.id, "r1")
    self.assertEqual(len(request.inputs), 1)
    self.assertEqual(request.inputs[0].name, "input")
    self.assertEqual(request.inputs[0].datatype, "FP32")
    self.assertEqual(list(request.inputs[0].shape), [2, 3])
    self.assertEqual(len(request.inputs[0].contents.fp32_contents), 0)
    self.assertEqual([o.name for o in request.outputs], ["output"])
    self.assertEqual(list(request.raw_input_contents), [x.astype("<f4").tobytes()])

  def test_decode_output_reads_the_raw_entry_of_the_named_output(self):
    p = ft.protos()
    response = p.service.ModelInferResponse()
    for name, values in (("other", [9.0]), ("output", [1.0, 2.0, 3.0, 4.0])):
      out = response.outputs.add(name=name, datatype="FP32")
      out.shape.extend([1, len(values)])
      response.raw_output_contents.append(np.array(values, "<f4").tobytes())
    np.testing.assert_array_equal(ft.decode_output(response), [[1.0, 2.0, 3.0, 4.0]])

  def test_decode_output_rejects_missing_or_short_raw_entries(self):
    p = ft.protos()
    response = p.service.ModelInferResponse()
    out = response.outputs.add(name="output", datatype="FP32")
    out.shape.extend([2])
    with self.assertRaisesRegex(AssertionError, "no raw_output_contents"):
      ft.decode_output(response)
    response.raw_output_contents.append(b"\0" * 4)
    with self.assertRaisesRegex(AssertionError, "4 raw bytes"):
      ft.decode_output(response)

  def test_accuracy_problem_applies_the_contract_tolerances(self):
    ref = np.ones(1000)
    self.assertIsNone(ft.accuracy_problem(ref + 1e-6, ref, "fp32"))
    self.assertIn("fp32", ft.accuracy_problem(ref + 1e-5, ref, "fp32"))
    self.assertIsNone(ft.accuracy_problem(ref + 1e-5, ref, "tf32"))
    spike = ref.copy()
    spike[3] += 2e-4
    self.assertIn("max abs", ft.accuracy_problem(spike, ref, "fp32"))
    self.assertIn("shape", ft.accuracy_problem(ref[:10], ref, "fp32"))
    self.assertIn("non-finite", ft.accuracy_problem(np.full(1000, np.nan), ref, "tf32"))


if __name__ == "__main__":
  ft.run_tests()
