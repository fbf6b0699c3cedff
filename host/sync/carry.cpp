#include "sync/carry.hpp"

#include "core/error.hpp"

namespace yeto::sync {

void carry_onto(std::span<const float> global, std::span<const float> ref, std::span<float> local) {
  if (global.size() != local.size() || ref.size() != local.size())
    throw Error("carry: the global state, the reference and the local values differ in length");
  for (std::size_t k = 0; k < local.size(); ++k)
    local[k] = local[k] == ref[k] ? global[k] : global[k] + (local[k] - ref[k]);
}

const char* carry_case_name(CarryCase c) {
  switch (c) {
    case CarryCase::none: return "none";
    case CarryCase::included: return "included";
    case CarryCase::pending: return "pending";
    case CarryCase::refused: return "refused";
    case CarryCase::lost: return "lost";
  }
  return "?";
}

CarryCase carry_case(bool outstanding, std::uint64_t push_base, const CarryNotes& notes, std::uint64_t link_epoch,
                     std::uint64_t version) {
  if (!outstanding) return CarryCase::none;
  // A note for this push: it merged, into a version that may still be on its way.
  if (notes.merged_version != 0 && notes.merged_push_base == push_base)
    return version >= notes.merged_version ? CarryCase::included : CarryCase::pending;
  if (notes.refused) return CarryCase::refused;
  if (notes.sent && notes.sent_epoch != link_epoch) return CarryCase::lost;
  return CarryCase::pending;
}

void FragmentCarry::pushed(std::uint64_t base_version, std::span<const float> values) {
  outstanding_ = true;
  push_base_ = base_version;
  snapshot_.assign(values.begin(), values.end());
}

void FragmentCarry::drop() {
  outstanding_ = false;
  snapshot_.clear();
  snapshot_.shrink_to_fit();
}

CarryCase FragmentCarry::apply(std::span<const float> global, std::uint64_t version, std::span<const float> held,
                               const CarryNotes& notes, std::uint64_t link_epoch, std::span<float> local) {
  const CarryCase c = carry_case(outstanding_, push_base_, notes, link_epoch, version);
  if (c == CarryCase::included) {
    carry_onto(global, snapshot_, local);  // what came after the push G' holds
    drop();
    return c;
  }
  carry_onto(global, held, local);  // everything G' does not count
  if (c == CarryCase::pending) carry_onto(global, held, snapshot_);  // the snapshot moves along
  else if (c != CarryCase::none) drop();                               // refused, lost: push again
  return c;
}

}  // namespace yeto::sync
