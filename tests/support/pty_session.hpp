// Runs a program on a pseudo-terminal, as a person at a terminal would: its output is read as it
// comes and input is typed (Ctrl-C included), for the suites of interactive commands.
#pragma once

#include <poll.h>
#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <map>
#include <string>
#include <vector>

namespace kernex::testing {

class PtySession {
 public:
  PtySession(const std::string& program, const std::vector<std::string>& args,
             const std::map<std::string, std::string>& env) {
    std::vector<std::string> argv_s{program};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<std::string> env_s;
    for (const auto& [k, v] : env) env_s.push_back(k + "=" + v);
    std::vector<char*> argv, envp;
    for (auto& a : argv_s) argv.push_back(a.data());
    for (auto& e : env_s) envp.push_back(e.data());
    argv.push_back(nullptr);
    envp.push_back(nullptr);
    pid_ = ::forkpty(&master_, nullptr, nullptr, nullptr);
    if (pid_ == 0) {
      ::execve(program.c_str(), argv.data(), envp.data());
      ::_exit(127);
    }
    EXPECT_GT(pid_, 0) << "forkpty failed";
  }
  ~PtySession() {
    if (pid_ > 0 && !waited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (master_ >= 0) ::close(master_);
  }
  PtySession(const PtySession&) = delete;
  PtySession& operator=(const PtySession&) = delete;

  // Reads output until `text` appears after what earlier expects consumed; false (with the
  // output so far in `output()`) when the program ends or `limit` passes first.
  bool expect(const std::string& text, std::chrono::milliseconds limit = std::chrono::seconds(60)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (true) {
      if (auto at = output_.find(text, consumed_); at != std::string::npos) {
        consumed_ = at + text.size();
        return true;
      }
      if (read_some(deadline) != Read::More) return false;
    }
  }
  void type(const std::string& text) {
    EXPECT_EQ(::write(master_, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  }
  // Ctrl-C: the terminal sends SIGINT to the program's foreground process group.
  void interrupt() { type("\x03"); }
  // Its exit code once it ended (reading the rest of its output); -1 for a signal. A program
  // still running after `limit` is killed and the test fails.
  int wait(std::chrono::milliseconds limit = std::chrono::seconds(60)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    Read r = Read::More;
    while (r == Read::More) r = read_some(deadline);
    if (r == Read::TimedOut) {
      ADD_FAILURE() << "still running after " << limit.count() << " ms: killed; output:\n"
                    << output_;
      ::kill(pid_, SIGKILL);
    }
    int status = 0;
    EXPECT_EQ(::waitpid(pid_, &status, 0), pid_);
    waited_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  const std::string& output() const { return output_; }

 private:
  enum class Read { More, Ended, TimedOut };
  Read read_some(std::chrono::steady_clock::time_point deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return Read::TimedOut;
    pollfd p{master_, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
    if (ready == 0) return Read::TimedOut;
    if (ready < 0) return Read::Ended;
    char buf[4096];
    const ssize_t n = ::read(master_, buf, sizeof buf);
    if (n <= 0) return Read::Ended;  // EIO: the program closed the terminal
    output_.append(buf, static_cast<std::size_t>(n));
    return Read::More;
  }

  int master_ = -1;
  pid_t pid_ = -1;
  bool waited_ = false;
  std::string output_;
  std::size_t consumed_ = 0;
};

}  // namespace kernex::testing
