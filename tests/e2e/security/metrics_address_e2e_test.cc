// --metrics-address, end to end: the HTTP endpoint (metrics and health) binds
// where it is told, apart from the gRPC address, so that it can be kept off
// the network the inference port faces. 127.0.0.2 is a loopback address on
// Linux without any configuration.


#include <cstdint>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/client.h"
#include "client/default_repository.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "tests/e2e/security/security_testing.h"
#include "tests/e2e/server_process.h"
#include "tests/testing/test_dir.h"

namespace fuseserve {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::ServerBinary;
using testing::ServerProcess;

// "0100007F" (/proc/net/tcp) -> "127.0.0.1"; an IPv4-mapped IPv6 address
// (/proc/net/tcp6; gRPC listens on dual-stack sockets) -> its IPv4 address;
// the IPv6 wildcard -> "::"; other IPv6 addresses stay hex. /proc writes each
// 32-bit word in host (little-endian) order.
std::string DecodeProcAddress(const std::string& hex) {
  if (hex == std::string(32, '0')) return "::";
  const std::string ipv4_hex = hex.size() == 8                                     ? hex
                               : absl::StartsWith(hex, "0000000000000000FFFF0000") ? hex.substr(24)
                                                                                   : "";
  if (ipv4_hex.empty()) return hex;
  uint32_t word = 0;
  if (!absl::SimpleHexAtoi(ipv4_hex, &word)) return hex;
  return absl::StrFormat("%d.%d.%d.%d", word & 0xff, (word >> 8) & 0xff, (word >> 16) & 0xff,
                         word >> 24);
}

// The local addresses of the listening TCP sockets (IPv4 and IPv6) on `port`.
std::set<std::string> ListeningAddresses(int port) {
  std::set<std::string> addresses;
  const std::string port_hex = absl::StrFormat("%04X", port);
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      const std::vector<std::string> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (fields.size() < 4 || fields[3] != "0A") continue;  // 0A = LISTEN
      const std::vector<std::string> local = absl::StrSplit(fields[1], ':');
      if (local.size() == 2 && local[1] == port_hex) {
        addresses.insert(DecodeProcAddress(local[0]));
      }
    }
  }
  return addresses;
}

TEST(MetricsAddressE2eTest, MetricsBindWhereAskedApartFromGrpc) {
  const TestDir repo("fuseserve-metrics-address");  // outlives the server (declared first)
  ASSERT_TRUE(WriteDefaultRepository(repo.path(), RepositorySize::kSmall).ok());
  // ServerProcess puts gRPC on 127.0.0.1; the later flag moves the metrics.
  auto server = ServerProcess::Start(ServerBinary(), repo.path(), {"--metrics-address=127.0.0.2"});
  ASSERT_TRUE(server.ok()) << server.status();

  httplib::Client metrics("127.0.0.2", (*server)->metrics_port());
  const auto scrape = metrics.Get("/metrics");
  ASSERT_TRUE(scrape) << httplib::to_string(scrape.error());
  EXPECT_EQ(scrape->status, 200);
  EXPECT_THAT(scrape->body, HasSubstr("nv_inference_request_success"));
  const auto ready = metrics.Get("/v2/health/ready");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 200);

  // Exactly where asked: no wildcard, and neither port on the other address.
  EXPECT_THAT(ListeningAddresses((*server)->metrics_port()),
              AllOf(Contains("127.0.0.2"), Not(Contains("127.0.0.1")), Not(Contains("0.0.0.0")),
                    Not(Contains("::"))));
  EXPECT_THAT(ListeningAddresses((*server)->grpc_port()),
              AllOf(Contains("127.0.0.1"), Not(Contains("127.0.0.2")), Not(Contains("0.0.0.0")),
                    Not(Contains("::"))));

  const absl::StatusOr<bool> grpc_ready =
      client::Client::Create((*server)->grpc_target())->ServerReady();
  ASSERT_TRUE(grpc_ready.ok()) << grpc_ready.status();
  EXPECT_TRUE(*grpc_ready);
  EXPECT_THAT((*server)->Log(), HasSubstr(absl::StrCat("metrics and health on http://127.0.0.2:",
                                                       (*server)->metrics_port())));
}

}  // namespace
}  // namespace fuseserve
