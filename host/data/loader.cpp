#include "data/loader.hpp"

#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "core/error.hpp"

namespace yeto::data {

namespace {

struct Decoded {
  Batch batch;
  std::vector<SkippedRow> errors;  // every failed row, in batch order
  std::optional<Error> first_error;
};

Decoded decode_batch(std::size_t index, const std::vector<std::size_t>& rows, const RowDecoder& decode) {
  Decoded d;
  d.batch.index = index;
  for (const std::size_t r : rows) {
    try {
      d.batch.samples.push_back(decode(r));
    } catch (const Error& e) {
      d.errors.push_back({r, e.what()});
      if (!d.first_error) d.first_error = e;
    } catch (const std::exception& e) {
      const std::string msg = std::string("internal error while decoding: ") + e.what();
      d.errors.push_back({r, msg});
      if (!d.first_error) d.first_error = Error(msg, ExitCode::failure);
    }
  }
  return d;
}

}  // namespace

struct Loader::State {
  BatchPlan plan;
  RowDecoder decode;
  LoaderOptions options;
  std::mutex mu;
  std::condition_variable cv_work;   // workers wait for room in the window
  std::condition_variable cv_ready;  // the consumer waits for its batch
  std::size_t next_claim = 0;        // next batch a worker takes
  std::size_t next_out = 0;          // next batch the consumer returns
  std::map<std::size_t, Decoded> ready;
  bool stop = false;
  std::size_t skipped = 0;
  std::vector<std::thread> threads;

  void work() {
    for (;;) {
      std::size_t index;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv_work.wait(lock, [&] {
          return stop || next_claim >= plan.size() || next_claim < next_out + static_cast<std::size_t>(options.prefetch);
        });
        if (stop || next_claim >= plan.size()) return;
        index = next_claim++;
      }
      Decoded d = decode_batch(index, plan[index], decode);
      {
        std::lock_guard<std::mutex> lock(mu);
        ready.emplace(index, std::move(d));
      }
      cv_ready.notify_all();
    }
  }
};

Loader::Loader(BatchPlan plan, RowDecoder decode, LoaderOptions options) : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.plan = std::move(plan);
  s.decode = std::move(decode);
  s.options = options;
  if (s.options.prefetch < 1) s.options.prefetch = 1;
  if (s.options.workers < 0) s.options.workers = 0;
  for (int i = 0; i < s.options.workers; ++i) s.threads.emplace_back([&s] { s.work(); });
}

Loader::~Loader() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stop = true;
  }
  state_->cv_work.notify_all();
  for (auto& t : state_->threads) t.join();
}

std::size_t Loader::size() const { return state_->plan.size(); }

std::size_t Loader::skipped_rows() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->skipped;
}

std::optional<Batch> Loader::next() {
  State& s = *state_;
  for (;;) {
    Decoded d;
    {
      std::unique_lock<std::mutex> lock(s.mu);
      if (s.next_out >= s.plan.size()) return std::nullopt;
      const std::size_t want = s.next_out;
      if (s.threads.empty()) {
        lock.unlock();
        d = decode_batch(want, s.plan[want], s.decode);
        lock.lock();
      } else {
        s.cv_ready.wait(lock, [&] { return s.ready.count(want) > 0; });
        d = std::move(s.ready.at(want));
        s.ready.erase(want);
      }
      ++s.next_out;
      s.skipped += d.errors.size();
    }
    s.cv_work.notify_all();
    if (d.first_error && s.options.on_bad_row == BadRowPolicy::error) throw *d.first_error;
    d.batch.skipped = std::move(d.errors);
    if (d.batch.samples.empty() && !s.options.keep_empty_batches) continue;  // every row of it was bad and skipped
    return std::move(d.batch);
  }
}

}  // namespace yeto::data
