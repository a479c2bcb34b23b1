// The internal Plan and its protobuf form: what the planner makes comes back equal through the message
// the store keeps, and a message no planner makes is refused naming its field.
#include "runtime/plan_proto.h"

#include <gtest/gtest.h>

#include <string>

#include "profiler/profile_key.h"
#include "tests/testing/executor_fixture.h"

namespace autouvm::runtime {
namespace {

using testing_executor::kMiB;
using testing_executor::PlanFor;

autouvm::v1::ProfileKey Key() {
  return profiler::DecodeKey(std::string(64, 'a'), 1, "h200-pcie5", 256 * kMiB, "autouvm");
}

TEST(PlanProtoTest, APlannedPlanComesBackEqualThroughItsMessageWithItsKey) {
  const AccessTrace t = testing::DecodeLikeTrace(8, 64, 1, /*elementwise=*/200);
  for (const int64_t budget : {8 * 64 * kMiB, 8 * 64 * kMiB / 2}) {
    const Plan plan = PlanFor(t, budget);
    const autouvm::v1::Plan message = ToProto(plan, Key());
    EXPECT_EQ(message.key().SerializeAsString(), Key().SerializeAsString());
    EXPECT_EQ(message.pinned_size(), std::ssize(plan.pinned));
    EXPECT_EQ(message.prefetches_size(), std::ssize(plan.prefetches));
    autouvm::v1::Plan parsed;
    ASSERT_TRUE(parsed.ParseFromString(message.SerializeAsString()));
    auto back = FromProto(parsed);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, plan) << "budget " << budget;
  }
  // The half budget streams: the round trip above covered fetches, not only pins.
  EXPECT_FALSE(PlanFor(t, 8 * 64 * kMiB / 2).prefetches.empty());
}

TEST(PlanProtoTest, AMessageNoPlannerMakesIsRefusedNamingItsField) {
  Plan good;
  good.budget_bytes = 100;
  good.pinned = {"param:w0"};
  good.prefetches.push_back({.for_op = 3, .issue_at_op = 1, .tensors = {"param:w1"}, .bytes = 10});
  good.staged = good.device_buffer = true;
  ASSERT_TRUE(FromProto(ToProto(good, Key())).ok());

  auto refused = [&](auto change, const std::string& names) {
    autouvm::v1::Plan m = ToProto(good, Key());
    change(m);
    auto plan = FromProto(m);
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument) << names;
    EXPECT_NE(plan.status().message().find(names), std::string::npos) << plan.status();
  };
  refused([](autouvm::v1::Plan& m) { m.set_budget_bytes(-1); }, "budget_bytes is -1");
  refused([](autouvm::v1::Plan& m) { m.set_streamed_bytes(-5); }, "streamed_bytes");
  refused([](autouvm::v1::Plan& m) { m.add_pinned(""); }, "pinned[1]: an empty tensor id");
  refused([](autouvm::v1::Plan& m) { m.add_affinity(""); }, "affinity[0]");
  refused([](autouvm::v1::Plan& m) { m.mutable_prefetches(0)->set_for_op(-2); }, "prefetches[0].for_op");
  refused([](autouvm::v1::Plan& m) { m.mutable_prefetches(0)->clear_tensors(); }, "prefetches[0]: fetches no tensor");
  refused([](autouvm::v1::Plan& m) { m.mutable_prefetches(0)->add_tensors(""); }, "prefetches[0].tensors[1]");
  refused([](autouvm::v1::Plan& m) { m.set_staged(false); }, "device_buffer is set without staged");
}

}  // namespace
}  // namespace autouvm::runtime
