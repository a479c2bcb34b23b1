#include "engine/step_turns.h"

#include <algorithm>

namespace autouvm::engine {

// Note [Passes by shares]: models served on one GPU share its compute stream and its link (one
// backend, runtime/compute_device.h), so their passes run one after another on the GPU whatever order
// their threads issue them in; left to that order, the models got the GPU in proportion to how fast
// their threads came back, and an operator could not say that one model matters more (issue 28:
// `models.<name>.share`). So each pass takes a turn, and turns go by start-time fair queueing: a member
// that starts waiting gets the start tag max(its last finish, the start tag of the pass that began
// last), its pass advances its finish by the pass's time over its share, and among the waiting members
// the smallest start tag goes first (ties: the lower id, the earlier loaded). A member that was idle
// cannot save credit (its tag starts at the current virtual time), a lone member never waits, and a
// member waits for at most the pass in progress plus the passes of members further behind their share.
// Under budgets each pass streams the non-resident weights, so turns keep one model's copies from
// slowing another's pass half way (the copies a plan issues ahead of its next pass, wrapping into the
// previous one, may still cross during another model's pass). What is lost is the overlap of one
// model's host-side dispatch with another's GPU work. The turn covers the forward pass alone
// (Scheduler::Run), not the hooks around it: a plan switch's host work (host copies made, weights
// staged: seconds, the first time) does not hold up the other models.
int StepTurns::Join(double share) {
  absl::MutexLock lock(&mu_);
  const int id = next_id_++;
  Member& m = members_[id];
  m.share = share > 0 ? share : 1;
  m.stats.share = m.share;
  return id;
}

void StepTurns::Leave(int id) {
  absl::MutexLock lock(&mu_);
  members_.erase(id);
}

bool StepTurns::MayGo(int id) const {
  if (running_ >= 0) return false;
  if (reserved_ >= 0 && reserved_ != id && absl::Now() < reserved_until_) return false;
  const Member& me = members_.at(id);
  for (const auto& [other, m] : members_) {
    if (other == id || !m.waiting) continue;
    if (m.finish < me.finish || (m.finish == me.finish && other < id)) return false;
  }
  return true;
}

void StepTurns::Begin(int id) {
  const absl::Time asked = absl::Now();
  absl::MutexLock lock(&mu_);
  auto it = members_.find(id);
  if (it == members_.end()) return;
  Member& me = it->second;
  me.finish = std::max(me.finish, now_);  // the start tag: no credit saved while idle
  if (reserved_ == id) reserved_ = -1;
  me.waiting = true;
  struct Ask {
    const StepTurns* turns;
    int id;
  } ask{this, id};
  const absl::Condition may_go(
      +[](Ask* a) ABSL_NO_THREAD_SAFETY_ANALYSIS { return a->turns->MayGo(a->id); }, &ask);
  // A reservation ends by time, which wakes no one: wait in slices.
  while (!mu_.AwaitWithTimeout(may_go, absl::Milliseconds(1))) {
  }
  me.waiting = false;
  reserved_ = -1;
  running_ = id;
  now_ = me.finish;
  me.stats.waited += absl::Now() - asked;
}

void StepTurns::End(int id, absl::Duration took) {
  absl::MutexLock lock(&mu_);
  if (running_ == id) running_ = -1;
  auto it = members_.find(id);
  if (it == members_.end()) return;
  Member& me = it->second;
  me.finish += absl::ToDoubleSeconds(took) / me.share;
  ++me.stats.turns;
  me.stats.held += took;
  // The member ending its turn is not waiting yet, though a busy one is about to ask again: if it would
  // still go first, the turn is kept for it a moment (a tenth of its pass, at most kGrace), or the
  // others would take it in the instant between its End and its next Begin, every time.
  reserved_ = -1;
  bool others = false;
  for (const auto& [other, m] : members_) {
    if (other == id || !m.waiting) continue;
    others = true;
    if (m.finish < std::max(me.finish, now_) || (m.finish == std::max(me.finish, now_) && other < id)) return;
  }
  if (!others) return;
  reserved_ = id;
  reserved_until_ = absl::Now() + std::min(kGrace, took / 10);
}

StepTurns::MemberStats StepTurns::Stats(int id) const {
  absl::MutexLock lock(&mu_);
  auto it = members_.find(id);
  return it == members_.end() ? MemberStats{} : it->second.stats;
}

}  // namespace autouvm::engine
