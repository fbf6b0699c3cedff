// The prefetching loader: worker threads decode the micro batches of a plan ahead of the
// consumer, into a bounded window of `prefetch` batches, so decoding overlaps training while
// memory stays bounded. Batches come out in plan order whatever the threads' timing (results
// are slotted by batch index), so a run is reproducible with any number of workers.
//
// A row that fails to decode is, under data.on_bad_row = "error", rethrown from next() when
// its batch is reached (with its manifest location); under "skip" it is left out of its batch
// and reported in Batch::skipped (a batch left empty is skipped entirely).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/decode.hpp"
#include "data/options.hpp"
#include "data/sampler.hpp"

namespace yeto::data {

struct SkippedRow {
  std::size_t row = 0;
  std::string reason;
};

struct Batch {
  std::size_t index = 0;  // position in the plan
  std::vector<Sample> samples;
  std::vector<SkippedRow> skipped;
};

struct LoaderOptions {
  int workers = 2;   // 0: decode on the consumer's thread
  int prefetch = 4;  // batches decoded ahead (at least 1)
  BadRowPolicy on_bad_row = BadRowPolicy::error;
  bool keep_empty_batches = false;  // return batches whose every row was skipped (for reports)
};

using RowDecoder = std::function<Sample(std::size_t row)>;

class Loader {
 public:
  Loader(BatchPlan plan, RowDecoder decode, LoaderOptions options);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // The next batch in plan order; nullopt at the end of the plan.
  std::optional<Batch> next();
  std::size_t size() const;            // batches in the plan
  std::size_t skipped_rows() const;    // so far

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace yeto::data
