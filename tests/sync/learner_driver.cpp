// Test-only learner island: drives the sync client with a synthetic quadratic objective
// (no model), so multi-process tests exercise real processes on 127.0.0.1.
//
//   loss_i(θ) = ½ Σ_k (θ_k − c_ik)²,  c_ik = sin(0.37 k + seed_i),  inner SGD θ ← θ − lr (θ − c_i)
//
// or, with --objective drift, a steady drift θ_k ← θ_k + r_k with r_k = lr where k (the value's
// position over all tensors, in order) is a multiple of 32 and lr / 40 elsewhere: with one
// fragment and --block 32 each q4 block's first value moves 40 times as fast as the rest, so one
// push alone rounds the rest to zero (below half a q4 step).
//
// Exit codes: 0 finished by the final cut (tensors written to --out), 4 no global state at
// start-up, 5 gave up on the syncer, 6 reached --max-steps without a final cut, 7 reached
// --budget-steps but no final cut came, 2 usage.
//
// Like a real island: with --budget-steps N it trains N steps in all, tells the syncer it is
// done and waits for the final cut; with --state FILE it saves its step and tensors there
// every --inner-steps steps and resumes from them when restarted (then catches up from the
// syncer's state). --pid-file names the process for tests that kill it; --crash-after-steps K
// kills the process (SIGKILL) K steps after each start; --exit-after-final C exits with code C
// once it holds and acknowledged the final cut (a failure after the end of the run).
// --init-value V starts every tensor at V instead of 0 (e.g. nan: an initial state the syncer
// refuses).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <thread>

#include <signal.h>
#include <unistd.h>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/strings.hpp"
#include "sync/client.hpp"

namespace ys = yeto::sync;

int main(int argc, char** argv) {
  std::map<std::string, std::string> a = {
      {"syncer", ""},          {"secret", ""},          {"id", ""},           {"tensors", "w1:300,w2:200,w3:100,w4:50"},
      {"fragments", "2"},      {"pattern", "binpack"},  {"inner-steps", "10"}, {"alpha", "1"},
      {"block", "32"},         {"step-ms", "5"},        {"max-steps", "100000"}, {"seed", "1"},
      {"lr", "0.05"},          {"out", ""},             {"events", ""},       {"heartbeat", "0.1"},
      {"learner-timeout", "0.8"}, {"grace-max", "1.0"}, {"round-deadline", "2.0"}, {"reconnect-budget", "15"},
      {"final-timeout", "5"},  {"run-id", "yeto"},      {"samples", "8"},     {"budget-steps", "0"},
      {"state", ""},           {"pid-file", ""},        {"crash-after-steps", "0"}, {"exit-after-final", "0"},
      {"init-value", "0"},     {"carry", "0"},         {"objective", "quadratic"}};
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (k.rfind("--", 0) != 0 || i + 1 >= argc || !a.count(k.substr(2))) {
      std::cerr << "learner_driver: bad argument " << k << "\n";
      return 2;
    }
    a[k.substr(2)] = argv[++i];
  }
  try {
    std::vector<ys::TensorSpec> specs;
    for (const auto& t : yeto::split(a["tensors"], ',')) {
      const auto kv = yeto::split(t, ':');
      specs.push_back({kv.at(0), std::stoull(kv.at(1))});
    }
    auto layout = ys::build_layout(specs, static_cast<std::uint32_t>(std::stoul(a["fragments"])),
                                   ys::parse_pattern(a["pattern"]));
    ys::ClientOptions o;
    ys::parse_host_port(a["syncer"], o.host, o.port);
    o.run_secret = yeto::read_file(a["secret"]);
    o.run_name = a["run-id"];
    o.learner_id = a["id"];
    o.inner_steps = static_cast<std::uint32_t>(std::stoul(a["inner-steps"]));
    o.alpha = std::stof(a["alpha"]);
    o.carry = a["carry"] == "1";
    o.quant_block = static_cast<std::uint32_t>(std::stoul(a["block"]));
    o.timeouts.heartbeat_s = std::stod(a["heartbeat"]);
    o.timeouts.learner_timeout_s = std::stod(a["learner-timeout"]);
    o.timeouts.grace_max_s = std::stod(a["grace-max"]);
    o.timeouts.round_deadline_s = std::stod(a["round-deadline"]);
    o.timeouts.reconnect_budget_s = std::stod(a["reconnect-budget"]);
    o.timeouts.final_timeout_s = std::stod(a["final-timeout"]);
    o.events = a["events"];
    const double seed = std::stod(a["seed"]);
    const double lr = std::stod(a["lr"]);
    const bool drift = a["objective"] == "drift";
    if (!drift && a["objective"] != "quadratic") throw yeto::Error("learner_driver: --objective is quadratic or drift");
    const int step_ms = std::stoi(a["step-ms"]);
    const std::uint64_t max_steps = std::stoull(a["max-steps"]);
    const std::uint64_t samples = std::stoull(a["samples"]);
    const std::uint64_t budget = std::stoull(a["budget-steps"]);
    const std::uint64_t crash_after = std::stoull(a["crash-after-steps"]);
    const std::string state = a["state"];
    const int exit_after_final = std::stoi(a["exit-after-final"]);
    if (!a["pid-file"].empty()) yeto::atomic_write(a["pid-file"], std::to_string(::getpid()) + "\n");

    const float init_value = std::stof(a["init-value"]);
    std::vector<std::vector<float>> t;
    std::vector<std::vector<float>> target;
    std::size_t k0 = 0;
    for (const auto& s : layout.tensors) {
      t.emplace_back(s.numel, init_value);
      std::vector<float> c(s.numel);
      for (std::size_t k = 0; k < s.numel; ++k) c[k] = static_cast<float>(std::sin(0.37 * double(k0 + k) + seed));
      target.push_back(std::move(c));
      k0 += s.numel;
    }
    std::vector<std::span<float>> ms;
    std::vector<std::span<const float>> cs;
    for (auto& v : t) {
      ms.emplace_back(v);
      cs.emplace_back(v);
    }
    // The island's own checkpoint: its step (uint64) and its tensors (float32, in order).
    std::uint64_t first_step = 0;
    if (!state.empty() && std::filesystem::exists(state)) {
      const std::string b = yeto::read_file(state);
      std::size_t want = 8;
      for (const auto& v : t) want += v.size() * 4;
      if (b.size() != want) throw yeto::Error("learner_driver: bad state file " + state);
      std::memcpy(&first_step, b.data(), 8);
      std::size_t off = 8;
      for (auto& v : t) {
        std::memcpy(v.data(), b.data() + off, v.size() * 4);
        off += v.size() * 4;
      }
      std::cout << "learner " << a["id"] << " resumed at step " << first_step << "\n";
    }
    auto save_state = [&](std::uint64_t next_step) {
      if (state.empty()) return;
      yeto::AtomicFile out(state);
      out.write(&next_step, 8);
      for (const auto& v : t) out.write(v.data(), v.size() * 4);
      out.commit();
    };
    auto write_out = [&] {
      if (a["out"].empty()) return;
      yeto::AtomicFile out(a["out"]);
      for (const auto& v : t) out.write(v.data(), v.size() * 4);
      out.commit();
    };
    ys::SyncClient client(o, layout);
    client.start(cs);
    if (!client.wait_for_global(ms, o.timeouts.reconnect_budget_s)) {
      std::cerr << "learner_driver " << o.learner_id << ": no global state\n";
      return 4;
    }
    for (std::uint64_t step = first_step; step < max_steps; ++step) {
      if (budget > 0 && step >= budget) {
        // The island's own budget: no more pushes; wait for the run's final cut.
        client.push_remaining(ms, o.timeouts.round_deadline_s);
        save_state(step);
        client.finish_local(step, samples);
        bool applied = false;
        while (!applied && !client.gave_up()) applied = client.wait_for_final(ms, 1.0);
        client.close(5.0);
        if (!applied) {
          std::cerr << "learner_driver " << o.learner_id << ": no final cut after the step budget\n";
          return 7;
        }
        write_out();
        std::cout << "learner " << o.learner_id << " finished its budget of " << budget << " steps\n";
        return exit_after_final;
      }
      if (crash_after > 0 && step - first_step >= crash_after) ::kill(::getpid(), SIGKILL);
      for (std::size_t i = 0, pos = 0; i < t.size(); ++i)
        for (std::size_t k = 0; k < t[i].size(); ++k, ++pos)
          t[i][k] += drift ? static_cast<float>(pos % 32 == 0 ? lr : lr / 40)
                           : -static_cast<float>(lr * (t[i][k] - target[i][k]));
      if (step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
      const auto r = client.step(ms, samples, {}, budget > 0 ? static_cast<std::int64_t>(budget - step - 1) : -1);
      if (r.failed) {
        std::cerr << "learner_driver " << o.learner_id << ": gave up on the syncer\n";
        return 5;
      }
      if (r.finished) {
        client.close(5.0);
        write_out();
        const auto s = client.stats();
        std::cout << "learner " << o.learner_id << " finished after " << step + 1 << " steps; pushes "
                  << s.pushes_sent << " sent, " << s.pushes_accepted << " accepted; bytes sent " << s.bytes_sent
                  << "\n";
        return exit_after_final;
      }
      if ((step + 1) % o.inner_steps == 0) save_state(step + 1);
    }
    client.close(1.0);
    return 6;
  } catch (const std::exception& e) {
    std::cerr << "learner_driver: " << e.what() << "\n";
    return 2;
  }
}
