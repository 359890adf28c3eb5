// An idle python3 that echoes lines (bench/repl): the floor for any pipe protocol with a Python
// worker, one round trip to another process and back with no work on either side.
#pragma once

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "bench_util.hpp"

namespace kernex::bench {

class EchoPython {
 public:
  EchoPython() {
    int in[2], out[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) die("repl", "pipe");
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      ::execl("/usr/bin/python3", "python3", "-I", "-c",
              "import sys\nr, w = sys.stdin.buffer, sys.stdout.buffer\n"
              "for line in r:\n    w.write(line)\n    w.flush()\n",
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    to_ = in[1];
    from_ = out[0];
  }
  ~EchoPython() {
    ::close(to_);
    ::close(from_);
    ::waitpid(pid_, nullptr, 0);
  }
  void round_trip(const std::string& line) {
    if (::write(to_, line.data(), line.size()) != static_cast<ssize_t>(line.size()))
      die("repl", "echo write");
    std::size_t got = 0;
    char buf[4096];
    while (got < line.size()) {
      ssize_t n = ::read(from_, buf, sizeof buf);
      if (n <= 0) die("repl", "echo read");
      got += static_cast<std::size_t>(n);
    }
  }

 private:
  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
};

}  // namespace kernex::bench
