// Multi-host launch, for real on one machine: two hosts made as Linux network namespaces
// (scripts/netns_hosts.sh: joined by a bridge, private 10.231.0.x addresses, loopback up),
// OpenMPI starting its daemon on each through scripts/netns_agent.sh instead of ssh, and the
// ranks talking TCP over the namespaces' addresses only (docs/distributed.md, "Several machines").
// Skipped, with the reason, where namespaces cannot be made (not root, no CAP_SYS_ADMIN, no ip).
//  - A W=2 run across the two hosts gives bit-for-bit the losses of the W=2 run on one host, and
//    its gradients crossed the link.
//  - A host that disappears (its processes SIGKILLed; its link down) ends the job within 60 s,
//    non-zero, naming the lost host and rank; the job then resumes on the remaining host alone
//    (W=1) from the last checkpoint and continues the uninterrupted curve within 1e-5, with the
//    same final data order and a clean data audit.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <regex>
#include <sstream>

#include "dist_test_util.h"
#include "job_control.h"
#include "tandem/dist/mpi_communicator.h"
#include "tandem/train/checkpoint.h"

namespace fs = std::filesystem;

namespace tandem {
namespace {

using namespace dist_testing;

const std::string kScripts = std::string(TANDEM_SOURCE_DIR) + "/scripts";
// The subnet scripts/netns_hosts.sh gives its hosts.
const char* kSubnet = "10.231.0.0/24";
// OpenMPI on the namespace hosts: TCP only, over the hosts' subnet only (never the machine's own
// network or shared memory), and keepalives on its daemons' connections so that a host whose link
// goes down is declared lost in 9-11 s (a probe within 2 s, then 3 unanswered 3 s apart) instead of
// TCP's ~15 minutes. TANDEM_DIST_TIMEOUT_S must exceed that: a rank that gives up first leaves
// mpirun waiting on the unreachable daemon.
std::string mpi_tcp_flags() {
  return std::string(" --mca btl tcp,self --mca btl_tcp_if_include ") + kSubnet +
         " --mca oob_tcp_if_include " + kSubnet +
         " --mca oob_tcp_keepalive_time 2 --mca oob_tcp_keepalive_intvl 3"
         " --mca oob_tcp_keepalive_probes 3";
}
const int kTimeoutS = 20;  // TANDEM_DIST_TIMEOUT_S in the fault runs; the notice comes at 5 s

std::string netns_script(const std::string& args) {
  return "timeout -k 5 60 bash " + kScripts + "/netns_hosts.sh " + args;
}

// Namespaces of test processes that no longer exist (killed by a ctest timeout): removed, so that
// a crashed run leaves nothing behind for long.
void remove_stale_hosts() {
  auto list = run_shell("ip netns list");
  std::istringstream lines(list.output);
  std::string line;
  const std::regex ours("^(tndmh([0-9]+)-[0-9]+)-(h[0-9]+|sw)\\b.*");
  std::smatch m;
  while (std::getline(lines, line))
    if (std::regex_match(line, m, ours) && !fs::exists("/proc/" + m[2].str()))
      run_shell(netns_script("down " + m[1].str()));
}

// N namespace hosts, unique to this process and test, removed (with anything still running in
// them) when the object goes, also when a test fails.
class NamespaceHosts {
 public:
  explicit NamespaceHosts(int n) {
    static int made = 0;
    name_ = "tndmh" + std::to_string(getpid()) + "-" + std::to_string(++made);
    auto r = run_shell(netns_script("up " + std::to_string(n) + " " + name_));
    made_ok_ = r.exit_code == 0;
    up_output_ = r.output;
  }
  ~NamespaceHosts() {
    auto r = run_shell(netns_script("down " + name_));
    if (r.exit_code != 0) std::cerr << "netns_hosts.sh down " << name_ << ": " << r.output;
  }
  NamespaceHosts(const NamespaceHosts&) = delete;
  NamespaceHosts& operator=(const NamespaceHosts&) = delete;

  bool ok() const { return made_ok_; }
  const std::string& up_output() const { return up_output_; }
  std::string host(int i) const { return name_ + "-h" + std::to_string(i); }

  // `tandem ARGS` under mpirun started on host 0 (as one would ssh to a head node), one rank on
  // each of hosts 0..hosts-1 (a host file in `dir`).
  std::string tandem_command(const std::string& dir, int hosts, const std::string& args,
                             const std::string& env = "") const {
    const std::string hostfile = dir + "/hosts" + std::to_string(hosts);
    std::string text;
    for (int i = 0; i < hosts; ++i) text += host(i) + " slots=1\n";
    testing::write_text(hostfile, text);
    const std::string agent = kScripts + "/netns_agent.sh";
    return "OMP_NUM_THREADS=1 " + env + " timeout -k 5 150 " + agent + " " + host(0) +
           " mpirun --allow-run-as-root --hostfile " + hostfile + " -np " + std::to_string(hosts) +
           " --map-by node --mca plm_rsh_agent " + agent + mpi_tcp_flags() + " " + TANDEM_BINARY +
           " " + args;
  }

  // Bytes received so far on host i's network interface.
  std::uint64_t rx_bytes(int i) const {
    auto r = run_shell("timeout 20 ip netns exec " + host(i) +
                       " cat /sys/class/net/eth0/statistics/rx_bytes");
    return r.exit_code == 0 ? std::stoull(r.output) : 0;
  }

  // Every process on host i, SIGKILLed at once: the host is gone.
  void kill_everything_on(int i) const {
    run_shell("timeout 20 ip netns pids " + host(i) + " | xargs -r kill -KILL");
  }
  void link_down(int i) const {
    auto r = run_shell("timeout 20 ip -n " + host(i) + " link set eth0 down");
    EXPECT_EQ(r.exit_code, 0) << r.output;
  }

 private:
  std::string name_;
  bool made_ok_ = false;
  std::string up_output_;
};

// Skips the test, with the reason, where namespace hosts cannot be made on this machine.
class MultiHost : public ::testing::Test {
 protected:
  void SetUp() override {
    auto probe = run_shell(netns_script("probe"));
    if (probe.exit_code != 0)
      GTEST_SKIP() << "network namespaces cannot be made here: " << probe.output;
    remove_stale_hosts();
  }
};

// The "training N parameters" count from a run's output.
std::uint64_t parameters_in(const std::string& output) {
  std::smatch m;
  const std::regex re("training ([0-9]+) parameters");
  return std::regex_search(output, m, re) ? std::stoull(m[1].str()) : 0;
}

// The placement line rank 0 prints (no namespaces needed).
TEST(MultiHostPlacement, NamesEachHostsRanksWithRuns) {
  EXPECT_EQ(dist::describe_placement({"a", "b"}), "a: rank 0; b: rank 1");
  EXPECT_EQ(dist::describe_placement({"n1", "n1", "n1", "n1", "n2", "n2", "n2", "n2"}),
            "n1: ranks 0-3; n2: ranks 4-7");
  EXPECT_EQ(dist::describe_placement({"a", "b", "a", "b"}), "a: ranks 0,2; b: ranks 1,3");
  EXPECT_EQ(dist::describe_placement({"x", "x", "x", "y", "x"}), "x: ranks 0-2,4; y: rank 3");
}

TEST_F(MultiHost, TwoHostsGiveTheSameLossesAsOneHost) {
  const int steps = 10;
  NamespaceHosts hosts(2);
  ASSERT_TRUE(hosts.ok()) << hosts.up_output();
  const std::string dir = temp_dir("multi_host_eq");

  const std::string local = dir + "/one_host";
  auto one = run_shell(dist_testing::tandem_command(2, "train " + train_args(local, steps)));
  ASSERT_EQ(one.exit_code, 0) << one.output;

  const std::string across = dir + "/two_hosts";
  const std::uint64_t rx_before = hosts.rx_bytes(1);
  auto two = run_shell(hosts.tandem_command(dir, 2, "train " + train_args(across, steps)));
  ASSERT_EQ(two.exit_code, 0) << two.output;
  const std::uint64_t received = hosts.rx_bytes(1) - rx_before;
  EXPECT_NE(two.output.find("2 ranks on several hosts: " + hosts.host(0) + ": rank 0; " +
                            hosts.host(1) + ": rank 1"),
            std::string::npos)
      << two.output;

  const auto a = read_metrics(local), b = read_metrics(across);
  ASSERT_EQ(a.size(), static_cast<std::size_t>(steps));
  ASSERT_EQ(b.size(), a.size());
  // The sums are gathered to rank 0 and added in rank order either way: identical bits.
  for (std::size_t i = 0; i < a.size(); ++i)
    for (const char* key : {"step", "tokens", "train/loss", "train/grad_norm"})
      EXPECT_EQ(a[i][key], b[i][key]) << key << " at step " << i + 1;
  // Rank 1 received at least the summed fp32 gradients once per step over its link.
  const std::uint64_t params = parameters_in(two.output);
  ASSERT_GT(params, 0u) << two.output;
  EXPECT_GE(received, steps * params * sizeof(float)) << "bytes received by host 1";
  std::cout << "[multi-host] W=2 across two namespace hosts: " << steps
            << " steps bit-for-bit equal to one host; host 1 received " << received << " bytes\n";
}

enum class HostLoss { kKilled, kLinkDown };
void PrintTo(HostLoss loss, std::ostream* os) {
  *os << (loss == HostLoss::kKilled ? "processes killed" : "link down");
}

class MultiHostLoss : public MultiHost, public ::testing::WithParamInterface<HostLoss> {};

TEST_P(MultiHostLoss, EndsTheJobNamingTheRankThenTheRemainingHostResumes) {
  const HostLoss loss = GetParam();
  const int steps = 40;
  NamespaceHosts hosts(2);
  ASSERT_TRUE(hosts.ok()) << hosts.up_output();
  const std::string dir = temp_dir("multi_host_loss");
  auto args = [&](const std::string& run) {
    return "train " + train_args(run, steps) + " trainer.save_interval=5 trainer.keep_last=2";
  };

  // The uninterrupted curve: W=2 on one host (equal to two hosts, test above).
  const std::string straight = dir + "/straight";
  auto ref = run_shell(dist_testing::tandem_command(2, args(straight)));
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  const auto reference = read_metrics(straight);

  const std::string run = dir + "/run";
  const std::string log = dir + "/job.log";
  pid_t job = start_job(
      hosts.tandem_command(dir, 2, args(run), "TANDEM_DIST_TIMEOUT_S=" + std::to_string(kTimeoutS)),
      log);
  ASSERT_GT(job, 0);
  ASSERT_TRUE(wait_for_steps(job, run, 12)) << testing::read_text(log);
  if (loss == HostLoss::kKilled)
    hosts.kill_everything_on(1);
  else
    hosts.link_down(1);
  int status = 0;
  const double seconds = wait_for_exit(job, &status, std::chrono::seconds(60));
  const std::string output = testing::read_text(log);
  ASSERT_GE(seconds, 0.0) << "the job still ran 60 s after host 1 was lost\n" << output;
  EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << output;
  // Rank 0 names the ranks' hosts at the start; after that, the failure names the lost one.
  const std::string placement =
      "2 ranks on several hosts: " + hosts.host(0) + ": rank 0; " + hosts.host(1) + ": rank 1";
  const std::size_t at = output.find(placement);
  ASSERT_NE(at, std::string::npos) << output;
  // Rank 0 says whom it waited for: on a link down (TCP just stops) its watchdog's notice, then
  // mpirun's keepalive declares the host's daemon lost and ends the job; on a kill (connections
  // reset, the host's daemon gone) mpirun ends the job at once, and rank 0 says it on the way.
  EXPECT_NE(output.find("tandem: rank 0 of 2 on host " + hosts.host(0) + ": ", at),
            std::string::npos)
      << output;
  EXPECT_NE(output.find("for rank 1 on host " + hosts.host(1), at), std::string::npos) << output;
  if (loss == HostLoss::kLinkDown) {
    EXPECT_NE(output.find("Remote daemon: [[", at), std::string::npos) << output;
  }
  const std::size_t lines_at_loss = read_metrics(run).size();
  ASSERT_LT(lines_at_loss, static_cast<std::size_t>(steps));
  auto checkpoints = train::list_checkpoints(run + "/checkpoints");
  ASSERT_FALSE(checkpoints.empty()) << output;
  const std::string last = fs::path(checkpoints.back()).filename();
  const int resume_step = std::stoi(last.substr(5));
  std::cout << "[multi-host] host 1 " << (loss == HostLoss::kKilled ? "killed" : "link down")
            << ": job ended after " << seconds << " s (exit status " << status
            << "), last checkpoint " << last << "\n";

  // The remaining host alone (W=1) resumes from the last checkpoint and finishes the curve.
  auto resumed = run_shell(hosts.tandem_command(dir, 1, args(run)));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("1 rank(s)"), std::string::npos) << resumed.output;
  expect_close_losses(reference, read_metrics(run), static_cast<std::size_t>(resume_step),
                      "W=2 on two hosts, then W=1 on one from step " + std::to_string(resume_step));
  const std::string final_state = "/checkpoints/step-0000" + std::to_string(steps) + "/state.json";
  EXPECT_EQ(read_json(straight + final_state)["loader"], read_json(run + final_state)["loader"]);
  auto audit =
      run_shell(std::string(TANDEM_BINARY) + " data audit " + fixture("train/parity.yaml") +
                " data.micro_batch_size=2 --world-sizes 1,2 --resume-at '" +
                std::to_string(resume_step) + ":2>1' --no-duplicates");
  EXPECT_EQ(audit.exit_code, 0) << audit.output;
  EXPECT_NE(audit.output.find("resume at step " + std::to_string(resume_step) +
                              " from world size 2 to 1"),
            std::string::npos)
      << audit.output;
}

INSTANTIATE_TEST_SUITE_P(HostLosses, MultiHostLoss,
                         ::testing::Values(HostLoss::kKilled, HostLoss::kLinkDown),
                         [](const auto& info) {
                           return info.param == HostLoss::kKilled ? "ProcessesKilled" : "LinkDown";
                         });

}  // namespace
}  // namespace tandem
