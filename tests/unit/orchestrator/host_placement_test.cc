// The hosts file of `strata run --hosts` (launch/host_placement.h), without root: this process's
// own namespace file (/proc/self/ns/net) stands for every host, a plain file for a head elsewhere.
// Every malformed file is refused naming its line, and a head that is not this process's
// namespace is refused. Emulated hosts for real: tests/integration/network/emulated_run_test.sh.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "orchestrator/launch/host_placement.h"

namespace strata {
namespace {

class HostPlacementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/host-placement-" + std::to_string(::getpid());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& text) {
    const std::string path = dir_ + "/hosts.txt";
    std::ofstream(path) << text;
    return path;
  }
  absl::Status Error(const std::string& text) { return HostPlacement::Load(Write(text)).status(); }

  std::string dir_;
  // This process's own namespace file: the head must be it; for the other hosts any namespace
  // file that exists will do.
  const std::string mine_ = "/proc/self/ns/net";
};

TEST_F(HostPlacementTest, ServicesTakeTheHostsAfterTheHeadInTurn) {
  auto hosts =
      HostPlacement::Load(Write("# comment\n"
                                "h0 " +
                                mine_ +
                                " 10.231.0.1 -   # the head\n"
                                "\n"
                                "h1 " +
                                mine_ +
                                " 10.231.0.2 -\n"
                                "h2 " +
                                mine_ + " 10.231.0.3 -\n"));
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  EXPECT_EQ(hosts->head().name, "h0");
  EXPECT_EQ(hosts->head().address, "10.231.0.1");
  EXPECT_EQ(hosts->head().cpu_group, "");
  EXPECT_EQ(hosts->ForService(0).name, "h1");
  EXPECT_EQ(hosts->ForService(1).name, "h2");
  EXPECT_EQ(hosts->ForService(2).name, "h1");  // more services than hosts: round robin
  EXPECT_EQ(hosts->ForService(5).address, "10.231.0.3");
}

TEST_F(HostPlacementTest, AMalformedFileIsRefusedNamingItsLine) {
  const std::string head = "h0 " + mine_ + " 10.231.0.1 -\n";
  struct Case {
    std::string text;
    std::string message;
  } cases[] = {
      {head + "h1 " + mine_ + " 10.231.0.2\n",
       "line 2: expected NAME NETNS ADDRESS CPU_GROUP, found 3"},
      {head + "h1 " + mine_ + " 10.231.0.x -\n", "line 2: '10.231.0.x' is not an IPv4 address"},
      {head + "h1 /run/netns/no-such-namespace-here 10.231.0.2 -\n",
       "line 2: no network namespace at /run/netns/no-such-namespace-here"},
      {head + "h1 " + mine_ + " 10.231.0.1 -\n", "line 2: host h1 (10.231.0.1) is listed twice"},
      {head + "h1 " + mine_ + " 10.231.0.2 /nonexistent-cgroup\n",
       "line 2: CPU group /nonexistent-cgroup has no writable cgroup.procs"},
      {head, "lists 1 host(s); the head and at least one host for the services are needed"},
  };
  for (const Case& c : cases) {
    absl::Status s = Error(c.text);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_NE(s.message().find(c.message), std::string::npos) << s.message();
  }
  EXPECT_EQ(HostPlacement::Load(dir_ + "/missing.txt").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(HostPlacementTest, AHeadThatIsNotThisProcesssNamespaceIsRefused) {
  // A file that is not this process's namespace file (another inode) stands for another host's.
  const std::string other = dir_ + "/other-namespace";
  std::ofstream(other) << "";
  absl::Status s = Error("h0 " + other + " 10.231.0.1 -\nh1 " + mine_ + " 10.231.0.2 -\n");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("must run on the head host h0 (network namespace " + other),
            std::string::npos)
      << s;
}

}  // namespace
}  // namespace strata
