// StepTurns (engine/step_turns.h, Note [Passes by shares]): passes of several models take turns in
// proportion to their shares while they all have work, a lone model never waits, one that was idle
// saves no credit, and no two passes hold a turn at once.
#include "engine/step_turns.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace autouvm::engine {
namespace {

// Each member's thread takes turns until `total` have been taken by all, each pass charged `pass`;
// the turns each got.
std::vector<int64_t> Race(StepTurns& turns, const std::vector<int>& ids, int total, absl::Duration pass) {
  std::atomic<int> taken{0}, inside{0}, overlaps{0};
  std::vector<std::thread> threads;
  std::vector<int64_t> got(ids.size(), 0);
  for (size_t i = 0; i < ids.size(); ++i) {
    threads.emplace_back([&, i] {
      while (true) {
        turns.Begin(ids[i]);
        if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
        const bool counted = taken.fetch_add(1) < total;
        if (counted) ++got[i];
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        inside.fetch_sub(1);
        turns.End(ids[i], pass);
        if (!counted) return;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(overlaps.load(), 0) << "two passes held a turn at once";
  return got;
}

TEST(StepTurnsTest, BusyModelsTakeTurnsByTheirShares) {
  StepTurns turns;
  const int a = turns.Join(3.0), b = turns.Join(1.0);
  const std::vector<int64_t> got = Race(turns, {a, b}, 200, absl::Milliseconds(10));
  // 3:1 of 200 is 150:50. A thread late to ask again (a loaded machine, past the grace) loses its turn
  // to the other: turns go to who waits. Equal turns would be 100:100.
  EXPECT_GE(got[0], 2 * got[1]) << got[0] << " : " << got[1];
  EXPECT_GE(got[1], 25) << got[0] << " : " << got[1];
  EXPECT_EQ(turns.Stats(a).share, 3.0);
  EXPECT_GE(turns.Stats(a).turns, got[0]);
  EXPECT_EQ(turns.Stats(a).held, absl::Milliseconds(10) * turns.Stats(a).turns);
}

TEST(StepTurnsTest, EqualSharesAlternateAndLongerPassesCountForMore) {
  StepTurns turns;
  const int a = turns.Join(1.0), b = turns.Join(0);  // a share of 0 counts as 1
  EXPECT_EQ(turns.Stats(b).share, 1.0);
  const std::vector<int64_t> got = Race(turns, {a, b}, 100, absl::Milliseconds(5));
  EXPECT_GE(got[0], 30) << got[0] << " : " << got[1];
  EXPECT_GE(got[1], 30) << got[0] << " : " << got[1];
  // Charged by time: a member whose passes take twice as long gets half the turns at equal shares.
  StepTurns timed;
  const int slow = timed.Join(1.0), fast = timed.Join(1.0);
  std::atomic<bool> done{false};
  std::atomic<int64_t> fast_turns{0}, slow_turns{0}, slow_while_both = 0;
  std::thread s([&] {
    while (!done) {
      timed.Begin(slow);
      if (fast_turns > 0) ++slow_turns;  // alone before and after the fast one, it takes every turn
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      timed.End(slow, absl::Milliseconds(20));
    }
  });
  std::thread f([&] {
    for (int i = 0; i < 120; ++i) {
      timed.Begin(fast);
      if (++fast_turns == 120) slow_while_both = slow_turns.load();  // inside the fast one's turn
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      timed.End(fast, absl::Milliseconds(10));
    }
    done = true;
  });
  f.join();
  s.join();
  // 60 by their times (20 ms against 10); equal turns would be 120.
  EXPECT_GE(slow_while_both.load(), 40) << slow_while_both.load() << " slow turns for 120";
  EXPECT_LE(slow_while_both.load(), 85) << slow_while_both.load() << " slow turns for 120";
}

TEST(StepTurnsTest, ALoneModelNeverWaitsAndAnIdleOneSavesNoCredit) {
  StepTurns turns;
  const int a = turns.Join(1.0), b = turns.Join(1.0);
  // a alone: 50 passes, each taken at once (b never asks).
  for (int i = 0; i < 50; ++i) {
    turns.Begin(a);
    turns.End(a, absl::Milliseconds(10));
  }
  EXPECT_LT(turns.Stats(a).waited, absl::Milliseconds(50));
  // Now both are busy: b, idle until now, starts level with a rather than 50 passes ahead of it.
  const std::vector<int64_t> got = Race(turns, {a, b}, 40, absl::Milliseconds(10));
  // Saved credit (50 passes) would give b all 40; a loaded machine can hand either some turns more.
  EXPECT_GE(got[1], 8) << got[0] << " : " << got[1];
  EXPECT_LE(got[1], 36) << got[0] << " : " << got[1];
  turns.Leave(b);
  turns.Begin(a);  // b gone: at once
  turns.End(a, absl::Milliseconds(1));
  EXPECT_EQ(turns.Stats(b).turns, 0) << "a member that left has no stats";
}

}  // namespace
}  // namespace autouvm::engine
