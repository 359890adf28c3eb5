// One thread per chat session: its jobs (turns, replies) run in arrival order, while the long
// poll goes on (an approval's button arrives while that session's turn waits for it).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <thread>

#include "kernex/log.hpp"

namespace kernex::telegram {

class SessionWorkers {
 public:
  using Job = std::function<void(std::stop_token)>;
  explicit SessionWorkers(std::stop_token stop) : stop_(stop) {}
  ~SessionWorkers() { stop_all(); }

  void post(const std::string& key, Job job) {
    std::lock_guard lock(mutex_);
    auto& worker = workers_[key];
    if (!worker) {
      worker = std::make_unique<Worker>();
      Worker* w = worker.get();
      w->thread = std::jthread([w](std::stop_token stop) { w->loop(stop); });
      w->forward = std::make_unique<std::stop_callback<std::function<void()>>>(
          stop_, std::function<void()>([w] { w->thread.request_stop(); }));
    }
    worker->push(std::move(job));
  }

  // Asks every worker to stop (a running turn is cancelled) and waits for them.
  void stop_all() {
    std::map<std::string, std::unique_ptr<Worker>> workers;
    {
      std::lock_guard lock(mutex_);
      workers.swap(workers_);
    }
    for (auto& [key, w] : workers) w->thread.request_stop();
    workers.clear();  // joins
  }

 private:
  struct Worker {
    std::mutex mutex;
    std::condition_variable_any ready;
    std::deque<Job> jobs;
    std::jthread thread;
    std::unique_ptr<std::stop_callback<std::function<void()>>> forward;

    void push(Job job) {
      std::lock_guard lock(mutex);
      jobs.push_back(std::move(job));
      ready.notify_one();
    }
    void loop(std::stop_token stop) {
      while (true) {
        Job job;
        {
          std::unique_lock lock(mutex);
          if (!ready.wait(lock, stop, [&] { return !jobs.empty(); })) return;
          job = std::move(jobs.front());
          jobs.pop_front();
        }
        // A job that throws ends that turn, never the process the channel runs in.
        try {
          job(stop);
        } catch (const std::exception& e) {
          log(LogLevel::Error, std::string("telegram: a chat's job failed: ") + e.what());
        } catch (...) {
          log(LogLevel::Error, "telegram: a chat's job failed");
        }
      }
    }
    ~Worker() {
      forward.reset();
      thread.request_stop();
      if (thread.joinable()) thread.join();
    }
  };

  std::stop_token stop_;
  std::mutex mutex_;
  std::map<std::string, std::unique_ptr<Worker>> workers_;
};

}  // namespace kernex::telegram
