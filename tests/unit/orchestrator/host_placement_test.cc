// The hosts file of `strata run --hosts` (launch/host_placement.h) with real network namespaces:
// this process's own (/proc/self/ns/net) is the head, and each other host is the namespace of a
// child process that made one of its own (unshare; root, or user namespaces where allowed).
// Every malformed file is refused naming its line, and so is a head that is not this process's
// namespace. Emulated hosts end to end: tests/integration/network/emulated_run_test.sh.
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "orchestrator/launch/host_placement.h"

namespace strata {
namespace {

// A child process in a network namespace of its own, for as long as the object lives.
class OtherNamespace {
 public:
  OtherNamespace() {
    int ready[2], hold[2];
    if (::pipe(ready) != 0 || ::pipe(hold) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(ready[0]);
      ::close(hold[1]);
      const char made =
          ::unshare(CLONE_NEWNET) == 0 || ::unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0 ? '1' : '0';
      ssize_t ignored = ::write(ready[1], &made, 1);
      char byte = 0;
      ignored = ::read(hold[0], &byte, 1);  // until the parent closes its end
      (void)ignored;
      ::_exit(0);
    }
    ::close(ready[1]);
    ::close(hold[0]);
    hold_ = hold[1];
    char made = '0';
    made_ = ::read(ready[0], &made, 1) == 1 && made == '1';
    ::close(ready[0]);
  }
  ~OtherNamespace() {
    if (hold_ >= 0) ::close(hold_);
    // Killed rather than waited out: a sibling forked later holds a copy of this pipe's end.
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  bool made() const { return made_; }
  std::string path() const { return "/proc/" + std::to_string(pid_) + "/ns/net"; }

 private:
  pid_t pid_ = -1;
  int hold_ = -1;
  bool made_ = false;
};

class HostPlacementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/host-placement-" + std::to_string(::getpid());
    std::filesystem::create_directories(dir_);
    for (int i = 0; i < 2; ++i) {
      others_.push_back(std::make_unique<OtherNamespace>());
      ASSERT_TRUE(others_.back()->made())
          << "cannot make a network namespace (unshare needs root or user namespaces)";
    }
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& text) {
    const std::string path = dir_ + "/hosts.txt";
    std::ofstream(path) << text;
    return path;
  }
  absl::Status Error(const std::string& text) { return HostPlacement::Load(Write(text)).status(); }
  std::string Host(int i, const std::string& address) const {
    return "h" + std::to_string(i + 1) + " " + others_[i]->path() + " " + address + " -\n";
  }

  std::string dir_;
  const std::string head_ = "h0 /proc/self/ns/net 10.231.0.1 -\n";
  std::vector<std::unique_ptr<OtherNamespace>> others_;
};

TEST_F(HostPlacementTest, ServicesTakeTheHostsAfterTheHeadInTurn) {
  auto hosts =
      HostPlacement::Load(Write("# comment\n" + head_ + "\n" + Host(0, "10.231.0.2") + "h2 " +
                                others_[1]->path() + " 10.231.0.3 -   # a comment\n"));
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  EXPECT_EQ(hosts->head().name, "h0");
  EXPECT_EQ(hosts->head().address, "10.231.0.1");
  EXPECT_EQ(hosts->head().cpu_group, "");
  EXPECT_EQ(hosts->ForService(0).name, "h1");
  EXPECT_EQ(hosts->ForService(0).network_namespace, others_[0]->path());
  EXPECT_EQ(hosts->ForService(1).name, "h2");
  EXPECT_EQ(hosts->ForService(2).name, "h1");  // more services than hosts: round robin
  EXPECT_EQ(hosts->ForService(5).address, "10.231.0.3");
}

TEST_F(HostPlacementTest, AMalformedFileIsRefusedNamingItsLine) {
  const std::string plain = dir_ + "/plain-file";
  std::ofstream(plain) << "";
  const std::string h1 = others_[0]->path();
  struct Case {
    std::string text;
    std::string message;
  } cases[] = {
      {head_ + "h1 " + h1 + " 10.231.0.2\n",
       "line 2: expected NAME NETNS ADDRESS CPU_GROUP, found 3"},
      {head_ + "h1 " + h1 + " 10.231.0.x -\n", "line 2: '10.231.0.x' is not an IPv4 address"},
      {head_ + "h1 /run/netns/no-such-namespace-here 10.231.0.2 -\n",
       "line 2: no network namespace at /run/netns/no-such-namespace-here"},
      {head_ + "h1 " + plain + " 10.231.0.2 -\n", "line 2: " + plain + " is not a namespace file"},
      {head_ + "h1 /proc/self/ns/net 10.231.0.2 -\n",
       "line 2: host h1 has the network namespace of host h0: every host needs its own"},
      {head_ + "h1 " + h1 + " 10.231.0.1 -\n", "line 2: host h1 (10.231.0.1) is listed twice"},
      {head_ + "h1 " + h1 + " 10.231.0.2 /nonexistent-cgroup\n",
       "line 2: CPU group /nonexistent-cgroup has no writable cgroup.procs"},
      {head_, "lists 1 host(s); the head and at least one host for the services are needed"},
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
  absl::Status s = Error(Host(0, "10.231.0.1") + "h2 /proc/self/ns/net 10.231.0.2 -\n");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(
      s.message().find("must run on the head host h1 (network namespace " + others_[0]->path()),
      std::string::npos)
      << s;
}

}  // namespace
}  // namespace strata
