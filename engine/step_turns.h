// StepTurns: the models of one GPU take turns at forward passes, by their shares
// (models.<name>.share; Note [Passes by shares], step_turns.cc). Each model's scheduler asks for a turn
// before a pass and returns it after; a model waits only while another's pass runs, and when several
// wait, the one furthest behind its share goes next.
//
//   StepTurns turns;
//   const int id = turns.Join(3.0);      // a model with three times the default share
//   turns.Begin(id);  ... the pass ...  turns.End(id, took);
//   turns.Leave(id);                     // unloaded
//
// Thread-safety: thread-safe; each member's Begin/End come from its own thread, in pairs.
#pragma once

#include <cstdint>
#include <map>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace autouvm::engine {

class StepTurns {
 public:
  // A new member with `share` (> 0; anything else counts as 1); its id.
  int Join(double share);
  // Removes a member (not while it waits in Begin or holds a turn).
  void Leave(int id);
  // Blocks until it is `id`'s turn: at once unless another member's pass runs; among waiting members,
  // the one whose passes so far, each weighed by 1 / share, add up to least goes first.
  void Begin(int id);
  // Ends `id`'s turn, charging it `took` / its share.
  void End(int id, absl::Duration took);

  struct MemberStats {
    double share = 1;
    int64_t turns = 0;
    absl::Duration waited;  // in Begin
    absl::Duration held;    // the passes' time
  };
  MemberStats Stats(int id) const;

  // A member for as long as it lives (Join, then Leave when destroyed); holds the turns it joined.
  class Seat {
   public:
    Seat(std::shared_ptr<StepTurns> turns, double share) : turns_(std::move(turns)), id_(turns_->Join(share)) {}
    ~Seat() { turns_->Leave(id_); }
    Seat(const Seat&) = delete;
    Seat& operator=(const Seat&) = delete;
    StepTurns* turns() const { return turns_.get(); }
    int id() const { return id_; }

   private:
    std::shared_ptr<StepTurns> turns_;
    int id_;
  };

 private:
  struct Member {
    double share = 1;
    double finish = 0;  // virtual time: its passes so far, each took / share, from when it started waiting
    bool waiting = false;
    MemberStats stats;
  };
  bool MayGo(int id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::map<int, Member> members_ ABSL_GUARDED_BY(mu_);
  int next_id_ ABSL_GUARDED_BY(mu_) = 0;
  int running_ ABSL_GUARDED_BY(mu_) = -1;  // the member whose pass runs, or -1
  double now_ ABSL_GUARDED_BY(mu_) = 0;    // virtual time: the start of the pass that began last
  // The member that just ended a turn it would take again, and until when the turn is kept for it.
  static constexpr absl::Duration kGrace = absl::Milliseconds(5);
  int reserved_ ABSL_GUARDED_BY(mu_) = -1;
  absl::Time reserved_until_ ABSL_GUARDED_BY(mu_);
};

}  // namespace autouvm::engine
