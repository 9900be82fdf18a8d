// The built fuseserve-cli binary against the real server (small default
// repository, ephemeral ports): every subcommand, exit codes, .npy in and
// out, NumPy interoperability, and `infer --shared-memory system` (nothing
// left behind after success, failure or an interrupt).

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "client/client.h"
#include "client/npy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/client/test_server.h"
#include "tests/testing/test_dir.h"

namespace fuseserve::client {
namespace {

using fuseserve::testing::kGemmModel;
using fuseserve::testing::kGroupNormModel;
using fuseserve::testing::kSlowModel;
using fuseserve::testing::RandomValues;
using fuseserve::testing::ReferenceOutput;
using fuseserve::testing::RelativeL2Error;
using ::testing::HasSubstr;
using ::testing::Not;

struct CliResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

class CliTest : public fuseserve::testing::SuiteServerTest {
 protected:
  void SetUp() override {
    SuiteServerTest::SetUp();
    url_ = server_->process->grpc_target();
  }

  std::string Path(const std::string& name) const { return directory_.Path(name); }

  // Runs fuseserve-cli with `args` (no shell interpretation of the args).
  CliResult Run(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {FUSESERVE_CLI};
    argv.insert(argv.end(), args.begin(), args.end());
    const std::string out = Path("stdout.txt"), err = Path("stderr.txt");
    CliResult result;
    const auto pid = fuseserve::testing::SpawnProcess(argv, out, err);
    if (!pid.ok()) {
      result.err = pid.status().ToString();
      return result;
    }
    pids_.push_back(*pid);
    const auto exit_code = fuseserve::testing::WaitForExit(*pid);
    result.exit_code = exit_code.ok() ? *exit_code : -1;
    result.out = ReadFile(out);
    result.err = ReadFile(err);
    return result;
  }

  // Runs a subcommand against the test server (--url given globally).
  CliResult RunOnServer(std::vector<std::string> args) {
    args.insert(args.begin(), {"--url", url_});
    return Run(args);
  }

  std::string url_;
  TestDir directory_{"cli-test"};  // this test's files, removed with it
  std::vector<pid_t> pids_;  // every fuseserve-cli the test ran
};

TEST_F(CliTest, EveryCommandHasHelp) {
  for (const std::string command :
       {"health", "metadata", "config", "stats", "infer", "make-repository", "bench"}) {
    const CliResult result = Run({command, "--help"});
    EXPECT_EQ(result.exit_code, 0) << command << ": " << result.err;
    EXPECT_THAT(result.out, HasSubstr("Usage")) << command;
    EXPECT_THAT(result.out, HasSubstr(command)) << command;
  }
  const CliResult top = Run({"--help"});
  EXPECT_EQ(top.exit_code, 0);
  EXPECT_THAT(top.out, HasSubstr("Commands:"));
}

TEST_F(CliTest, BadCommandLinesExitWithTwo) {
  EXPECT_EQ(Run({}).exit_code, 2);
  const CliResult unknown = Run({"frobnicate"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_THAT(unknown.err, HasSubstr("unknown command \"frobnicate\""));
  const CliResult unknown_flag = RunOnServer({"health", "--verbose"});
  EXPECT_EQ(unknown_flag.exit_code, 2);
  EXPECT_THAT(unknown_flag.err, HasSubstr("unknown option --verbose"));
  EXPECT_EQ(RunOnServer({"metadata"}).exit_code, 2);
  EXPECT_EQ(RunOnServer({"stats", "a", "b"}).exit_code, 2);
  EXPECT_EQ(Run({"make-repository"}).exit_code, 2);
}

TEST_F(CliTest, HealthReportsServerAndEveryModel) {
  const CliResult result = RunOnServer({"health"});
  EXPECT_EQ(result.exit_code, 0) << result.out << result.err;
  EXPECT_THAT(result.out, HasSubstr("server live:  true"));
  EXPECT_THAT(result.out, HasSubstr("server ready: true"));
  for (const char* model : {kGemmModel, kGroupNormModel, kSlowModel}) {
    EXPECT_THAT(result.out, HasSubstr(absl::StrCat("model ", model))) << result.out;
  }
  EXPECT_THAT(result.out, Not(HasSubstr("NOT READY")));
}

TEST_F(CliTest, HealthFailsForAnUnknownModelAndAnUnreachableServer) {
  const CliResult known = RunOnServer({"health", "--model", kGroupNormModel});
  EXPECT_EQ(known.exit_code, 0) << known.err;
  EXPECT_THAT(known.out, HasSubstr("model groupnorm: ready"));

  const CliResult unknown =
      RunOnServer({"health", "--model", kGroupNormModel, "--model", "no_such_model"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_THAT(unknown.out, HasSubstr("model no_such_model: NOT READY"));

  const CliResult unreachable = Run({"health", "--url", "127.0.0.1:1"});
  EXPECT_EQ(unreachable.exit_code, 1);
  EXPECT_THAT(unreachable.err, HasSubstr("UNAVAILABLE"));
}

TEST_F(CliTest, UrlIsAcceptedBeforeAndAfterTheCommand) {
  EXPECT_EQ(Run({"--url=" + url_, "health", "--model", kGroupNormModel}).exit_code, 0);
  EXPECT_EQ(Run({"health", "--model", kGroupNormModel, "--url", url_}).exit_code, 0);
  // The command's own --url overrides the global one.
  EXPECT_EQ(Run({"--url", "127.0.0.1:1", "health", "--url", url_}).exit_code, 0);
}

TEST_F(CliTest, TlsOptionsAreListedAndCheckedBeforeConnecting) {
  const CliResult top = Run({"--help"});
  for (const char* flag :
       {"--ssl", "--root-certificates", "--private-key", "--certificate-chain"}) {
    EXPECT_THAT(top.out, HasSubstr(flag));
  }
  std::ofstream(Path("key.pem")) << "-----BEGIN PRIVATE KEY-----\n";

  const CliResult without_ssl = Run({"--private-key", Path("key.pem"), "--url", url_, "health"});
  EXPECT_EQ(without_ssl.exit_code, 2);
  EXPECT_THAT(without_ssl.err, HasSubstr("--private-key is given but TLS is off (add --ssl)"));

  const CliResult key_alone =
      RunOnServer({"config", kGroupNormModel, "--ssl", "--private-key", Path("key.pem")});
  EXPECT_EQ(key_alone.exit_code, 2);
  EXPECT_THAT(key_alone.err, HasSubstr("--private-key and --certificate-chain go together"));

  const CliResult missing = RunOnServer({"infer", kGroupNormModel, "--random", "1,8,2,2", "--ssl",
                                         "--root-certificates", Path("absent.pem")});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.err, HasSubstr("--root-certificates: cannot open " + Path("absent.pem")));
}

TEST_F(CliTest, SslAgainstAPlaintextServerFails) {
  const CliResult result = Run({"--ssl", "--url", url_, "health"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.err, HasSubstr("UNAVAILABLE"));
}

TEST_F(CliTest, MetadataAndConfigPrintJson) {
  const CliResult metadata = RunOnServer({"metadata", kGroupNormModel});
  ASSERT_EQ(metadata.exit_code, 0) << metadata.err;
  const auto metadata_json = nlohmann::json::parse(metadata.out);
  EXPECT_EQ(metadata_json["name"], kGroupNormModel);
  EXPECT_EQ(metadata_json["inputs"][0]["name"], "input");
  EXPECT_EQ(metadata_json["inputs"][0]["datatype"], "FP32");

  const CliResult config = RunOnServer({"config", kGemmModel, "--version", "1"});
  ASSERT_EQ(config.exit_code, 0) << config.err;
  const auto config_json = nlohmann::json::parse(config.out);
  EXPECT_EQ(config_json["platform"], kGemmModel);
  EXPECT_EQ(config_json["max_batch_size"], 16);
  EXPECT_EQ(config_json["parameters"]["precision"]["string_value"], "fp32");
}

TEST_F(CliTest, MetadataAndConfigOfUnknownModelsFailWithNotFound) {
  for (const std::string command : {"metadata", "config"}) {
    const CliResult result = RunOnServer({command, "no_such_model"});
    EXPECT_EQ(result.exit_code, 1) << command;
    EXPECT_THAT(result.err, HasSubstr("NOT_FOUND")) << command;
    EXPECT_THAT(result.err, HasSubstr("no_such_model")) << command;
    EXPECT_TRUE(result.out.empty()) << command;
  }
}

TEST_F(CliTest, StatsPrintsATableAndJson) {
  ASSERT_EQ(RunOnServer({"infer", kGemmModel, "--random", "2,64"}).exit_code, 0);
  const CliResult table = RunOnServer({"stats", kGemmModel});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("queue us"));
  EXPECT_THAT(table.out, HasSubstr("compute us"));
  EXPECT_THAT(table.out, HasSubstr(kGemmModel));

  const CliResult all = RunOnServer({"stats"});
  ASSERT_EQ(all.exit_code, 0) << all.err;
  EXPECT_THAT(all.out, HasSubstr(kSlowModel));

  const CliResult json = RunOnServer({"stats", kGemmModel, "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const auto parsed = nlohmann::json::parse(json.out);
  ASSERT_EQ(parsed["model_stats"].size(), 1u);
  EXPECT_EQ(parsed["model_stats"][0]["name"], kGemmModel);
  // proto3 JSON writes uint64 as strings.
  EXPECT_GE(std::stoll(
                parsed["model_stats"][0]["inference_stats"]["success"]["count"].get<std::string>()),
            1);

  const CliResult unknown = RunOnServer({"stats", "no_such_model"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_THAT(unknown.err, HasSubstr("NOT_FOUND"));
}

TEST_F(CliTest, InferWritesExactlyWhatTheServerAnswered) {
  const Shape shape = {2, 8, 5, 7};
  const std::vector<float> input = RandomValues(NumElements(shape), 21);
  ASSERT_TRUE(WriteNpyFile(Path("x.npy"), shape, input).ok());

  const CliResult result = RunOnServer({"infer", kGroupNormModel, "--input", Path("x.npy"),
                                        "--output", Path("y.npy"), "--id", "cli-1"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_THAT(result.out, HasSubstr("id cli-1"));
  EXPECT_THAT(result.out, HasSubstr("output \"output\" [2, 8, 5, 7]"));
  EXPECT_THAT(result.out, HasSubstr("mean"));

  const auto output = ReadNpyFile(Path("y.npy"));
  ASSERT_TRUE(output.ok()) << output.status();
  EXPECT_EQ(output->shape, shape);
  const auto expected = ReferenceOutput(server_->repository(), kGroupNormModel, shape, input);
  ASSERT_TRUE(expected.ok()) << expected.status();
  EXPECT_LE(RelativeL2Error(output->data, *expected), 1e-6);

  // The same request through the library: the file holds the answer bit for bit.
  auto direct = Client::Create(url_)->Infer(kGroupNormModel, {{"input", shape, input}});
  ASSERT_TRUE(direct.ok()) << direct.status();
  ASSERT_EQ(direct->outputs.size(), 1u);
  ASSERT_EQ(direct->outputs[0].data.size(), output->data.size());
  EXPECT_EQ(std::memcmp(direct->outputs[0].data.data(), output->data.data(),
                        output->data.size() * sizeof(float)),
            0);
}

TEST_F(CliTest, InferWithRandomInputIsReproducibleBySeed) {
  for (const std::string name : {"a.npy", "b.npy"}) {
    const CliResult result = RunOnServer(
        {"infer", kGemmModel, "--random", "3,64", "--seed", "5", "--output", Path(name)});
    ASSERT_EQ(result.exit_code, 0) << result.err;
    EXPECT_THAT(result.out, HasSubstr("random U[0,1), seed 5"));
  }
  const auto a = ReadNpyFile(Path("a.npy"));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->shape, (Shape{3, 64}));
  EXPECT_EQ(ReadFile(Path("a.npy")), ReadFile(Path("b.npy")));
}

TEST_F(CliTest, InferRejectsFilesItCannotUse) {
  const std::string float64 = Path("d.npy");
  std::string header = "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 8, 2, 2), }";
  while ((10 + header.size() + 1) % 64 != 0) header.push_back(' ');
  header.push_back('\n');
  std::ofstream(float64, std::ios::binary)
      << std::string("\x93NUMPY\x01\x00", 8) << static_cast<char>(header.size()) << '\0' << header
      << std::string(32 * 8, '\0');
  const CliResult result = RunOnServer({"infer", kGroupNormModel, "--input", float64});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(
      result.err,
      HasSubstr(float64 + " has dtype '<f8' (float64); fuseserve-cli needs float32 ('<f4')"));

  std::ofstream(Path("junk.npy")) << "not an array";
  const CliResult junk = RunOnServer({"infer", kGroupNormModel, "--input", Path("junk.npy")});
  EXPECT_EQ(junk.exit_code, 1);
  EXPECT_THAT(junk.err, HasSubstr("not a NumPy .npy file"));

  const CliResult missing = RunOnServer({"infer", kGroupNormModel, "--input", Path("none.npy")});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.err, HasSubstr("cannot open"));
}

TEST_F(CliTest, InferReportsServerErrorsAndDeadlines) {
  const CliResult bad_shape = RunOnServer({"infer", kGroupNormModel, "--random", "1,3,4,4"});
  EXPECT_EQ(bad_shape.exit_code, 1);
  EXPECT_THAT(bad_shape.err, HasSubstr("INVALID_ARGUMENT"));

  const CliResult unknown = RunOnServer({"infer", "no_such_model", "--random", "1,8"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_THAT(unknown.err, HasSubstr("NOT_FOUND"));

  // slow_groupnorm holds a lone request for 30 s waiting for a batch.
  const CliResult deadline =
      RunOnServer({"infer", kSlowModel, "--random", "1,8,2,2", "--timeout-ms", "200"});
  EXPECT_EQ(deadline.exit_code, 1);
  EXPECT_THAT(deadline.err, HasSubstr("DEADLINE_EXCEEDED"));

  const CliResult queue_timeout =
      RunOnServer({"infer", kSlowModel, "--random", "1,8,2,2", "--queue-timeout-us", "2000"});
  EXPECT_EQ(queue_timeout.exit_code, 1);
  EXPECT_THAT(queue_timeout.err, HasSubstr("DEADLINE_EXCEEDED"));
}

TEST_F(CliTest, InferUsageErrorsExitWithTwo) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"infer", kGroupNormModel},
           {"infer", "--random", "1,8"},
           {"infer", kGroupNormModel, "--random", "1,8", "--input", "x.npy"},
           {"infer", kGroupNormModel, "--random", "1,x"},
           {"infer", kGroupNormModel, "--random", "1,8", "--seed", "-1"},
           {"infer", kGroupNormModel, "--random", "1,8", "--timeout-ms"},
           {"infer", kGroupNormModel, "--random", "1,8", "--shared-memory", "cuda"},
           {"infer", kGroupNormModel, "--random", "1,8", "--output-shared-memory-size", "64"},
       }) {
    const CliResult result = RunOnServer(args);
    EXPECT_EQ(result.exit_code, 2) << absl::StrJoin(args, " ") << ": " << result.err;
    EXPECT_THAT(result.err, HasSubstr("Usage")) << absl::StrJoin(args, " ");
  }
}

TEST_F(CliTest, InferHelpListsTheSharedMemoryFlags) {
  const CliResult result = Run({"infer", "--help"});
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_THAT(result.out, HasSubstr("--shared-memory none|system"));
  EXPECT_THAT(result.out, HasSubstr("--output-shared-memory-size BYTES"));
  EXPECT_THAT(result.out, HasSubstr("Exit code 0"));
}

TEST_F(CliTest, InferThroughSharedMemoryRefusedByTheServerLeavesNothingBehind) {
  // This server runs without --allow-shared-memory.
  const CliResult result =
      RunOnServer({"infer", kGemmModel, "--random", "2,64", "--shared-memory", "system"});
  EXPECT_EQ(result.exit_code, 1) << result.out;
  EXPECT_THAT(result.err, HasSubstr("registering system shared-memory region"));
  EXPECT_THAT(fuseserve::testing::SharedMemoryObjectsOf(pids_.back()), ::testing::IsEmpty());
}

// The server with --allow-shared-memory.
class CliSharedMemoryTest : public CliTest {
 protected:
  static void SetUpTestSuite() { StartSuiteServer({fuseserve::testing::kAllowSharedMemoryFlag}); }

  void TearDown() override {
    // Nothing is left registered or in /dev/shm, whatever the command did.
    const auto status = Client::Create(url_)->SystemSharedMemoryStatus();
    EXPECT_TRUE(status.ok()) << status.status();
    if (status.ok()) {
      EXPECT_EQ(status->regions_size(), 0);
    }
    for (pid_t pid : pids_) {
      EXPECT_THAT(fuseserve::testing::SharedMemoryObjectsOf(pid), ::testing::IsEmpty());
    }
    CliTest::TearDown();
  }
};

TEST_F(CliSharedMemoryTest, InferThroughSharedMemoryWritesWhatPlainInferWrites) {
  const std::vector<std::vector<std::string>> cases = {
      // Fixed output dims: the region is sized from the metadata.
      {kGemmModel, "--random", "3,64", "--seed", "4"},
      // Variable output dims: the size is given.
      {kGroupNormModel, "--random", "2,8,5,7", "--seed", "5", "--output-shared-memory-size",
       "4096"},
  };
  for (const std::vector<std::string>& args : cases) {
    SCOPED_TRACE(args[0]);
    std::vector<std::string> plain = {"infer",  args[0], "--random", args[2],
                                      "--seed", args[4], "--output", Path("plain.npy")};
    const CliResult expected = RunOnServer(plain);
    ASSERT_EQ(expected.exit_code, 0) << expected.err;

    std::vector<std::string> shared = {"infer", "--shared-memory", "system", "--output",
                                       Path("shared.npy")};
    shared.insert(shared.end(), args.begin(), args.end());
    const CliResult result = RunOnServer(shared);
    ASSERT_EQ(result.exit_code, 0) << result.err;
    EXPECT_THAT(result.out, HasSubstr("tensors in system shared memory (2 regions)"));
    // The same report apart from that line.
    EXPECT_EQ(
        absl::StrReplaceAll(result.out, {{"tensors in system shared memory (2 regions)\n", ""},
                                         {Path("shared.npy"), Path("plain.npy")}}),
        expected.out);

    const auto plain_output = ReadNpyFile(Path("plain.npy"));
    const auto shared_output = ReadNpyFile(Path("shared.npy"));
    ASSERT_TRUE(plain_output.ok() && shared_output.ok());
    EXPECT_EQ(shared_output->shape, plain_output->shape);
    EXPECT_LE(RelativeL2Error(shared_output->data, plain_output->data), 1e-6);
  }
}

TEST_F(CliSharedMemoryTest, VariableOutputDimsNeedTheSizeAndLeaveNothingBehind) {
  const CliResult result =
      RunOnServer({"infer", kGroupNormModel, "--random", "2,8,5,7", "--shared-memory", "system"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.err, HasSubstr("variable dims [-1, 8, -1, -1]"));
  EXPECT_THAT(result.err, HasSubstr("--output-shared-memory-size"));
}

TEST_F(CliSharedMemoryTest, ATooSmallOutputRegionFailsAndLeavesNothingBehind) {
  const CliResult result = RunOnServer({"infer", kGemmModel, "--random", "3,64", "--shared-memory",
                                        "system", "--output-shared-memory-size", "16"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_FALSE(result.err.empty());
}

TEST_F(CliSharedMemoryTest, AnInterruptedInferUnregistersAndRemovesItsRegions) {
  // slow_groupnorm holds a lone request for 30 s waiting for a batch.
  const auto pid = fuseserve::testing::SpawnProcess(
      {FUSESERVE_CLI, "--url", url_, "infer", kSlowModel, "--random", "1,8,2,2", "--shared-memory",
       "system", "--output-shared-memory-size", "128"},
      Path("interrupted.txt"));
  ASSERT_TRUE(pid.ok()) << pid.status();
  const absl::Status registered = fuseserve::testing::WaitForRegisteredRegions(url_, 2);
  EXPECT_TRUE(registered.ok()) << registered << "\n" << ReadFile(Path("interrupted.txt"));
  ::kill(*pid, SIGINT);
  const auto exit_code = fuseserve::testing::WaitForExit(*pid);
  ASSERT_TRUE(exit_code.ok()) << exit_code.status();
  EXPECT_EQ(*exit_code, 130) << ReadFile(Path("interrupted.txt"));
  EXPECT_THAT(ReadFile(Path("interrupted.txt")),
              HasSubstr("fuseserve-cli infer: interrupted (SIGINT)"));
  EXPECT_THAT(fuseserve::testing::SharedMemoryObjectsOf(*pid), ::testing::IsEmpty());
}

TEST_F(CliTest, MakeRepositoryWritesTheSmallRepository) {
  const std::string repository = Path("repo");
  const CliResult result = Run({"make-repository", repository, "--small"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  for (const char* model : {fuseserve::testing::kConvModel, kGemmModel, kGroupNormModel}) {
    EXPECT_TRUE(
        std::filesystem::exists(std::filesystem::path(repository) / model / "config.pbtxt"));
    EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(repository) / model / "1" /
                                        "model.safetensors"));
  }
}

TEST_F(CliTest, NumpyReadsOurOutputAndWeReadOrRejectNumpyFiles) {
  if (std::system(FUSESERVE_TEST_PYTHON " -c 'import numpy' 2>/dev/null") != 0) {
    GTEST_SKIP() << FUSESERVE_TEST_PYTHON << " has no numpy";
  }
  const std::string script = Path("make.py");
  std::ofstream(script) << "import numpy as np, sys\n"
                           "d = sys.argv[1]\n"
                           "x = np.random.default_rng(3).standard_normal((2, 8, 3, 5))"
                           ".astype(np.float32)\n"
                           "np.save(d + '/c.npy', x)\n"
                           "np.save(d + '/f.npy', np.asfortranarray(x))\n"
                           "np.save(d + '/d.npy', x.astype(np.float64))\n";
  const std::string script_command =
      absl::StrCat(FUSESERVE_TEST_PYTHON, " ", script, " ", directory_.path());
  ASSERT_EQ(std::system(script_command.c_str()), 0);

  const CliResult c_order =
      RunOnServer({"infer", kGroupNormModel, "--input", Path("c.npy"), "--output", Path("y.npy")});
  ASSERT_EQ(c_order.exit_code, 0) << c_order.err;
  const CliResult fortran = RunOnServer({"infer", kGroupNormModel, "--input", Path("f.npy")});
  EXPECT_EQ(fortran.exit_code, 1);
  EXPECT_THAT(fortran.err, HasSubstr("Fortran (column-major) order"));
  const CliResult float64 = RunOnServer({"infer", kGroupNormModel, "--input", Path("d.npy")});
  EXPECT_EQ(float64.exit_code, 1);
  EXPECT_THAT(float64.err, HasSubstr("has dtype '<f8' (float64)"));

  // NumPy loads the CLI's output; it matches the reference on NumPy's own input.
  const auto input = ReadNpyFile(Path("c.npy"));
  ASSERT_TRUE(input.ok()) << input.status();
  const auto expected =
      ReferenceOutput(server_->repository(), kGroupNormModel, input->shape, input->data);
  ASSERT_TRUE(expected.ok()) << expected.status();
  ASSERT_TRUE(WriteNpyFile(Path("ref.npy"), input->shape, *expected).ok());
  const std::string check = Path("check.py");
  std::ofstream(check) << "import numpy as np, sys\n"
                          "d = sys.argv[1]\n"
                          "y = np.load(d + '/y.npy')\n"
                          "ref = np.load(d + '/ref.npy')\n"
                          "assert y.dtype == np.float32 and y.shape == (2, 8, 3, 5), (y.dtype, "
                          "y.shape)\n"
                          "err = np.linalg.norm(y.astype(np.float64) - ref) / np.linalg.norm(ref)\n"
                          "assert err <= 1e-6, err\n";
  const std::string check_command =
      absl::StrCat(FUSESERVE_TEST_PYTHON, " ", check, " ", directory_.path());
  EXPECT_EQ(std::system(check_command.c_str()), 0);
}

}  // namespace
}  // namespace fuseserve::client
