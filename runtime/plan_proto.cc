#include "runtime/plan_proto.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace autouvm::runtime {
namespace {

void AddAll(const std::vector<std::string>& ids, google::protobuf::RepeatedPtrField<std::string>* out) {
  out->Reserve(static_cast<int>(ids.size()));
  for (const std::string& id : ids) out->Add(std::string(id));
}

absl::StatusOr<std::vector<std::string>> Ids(const google::protobuf::RepeatedPtrField<std::string>& ids,
                                             const char* field) {
  std::vector<std::string> out(ids.begin(), ids.end());
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i].empty())
      return absl::InvalidArgumentError(absl::StrCat("plan: ", field, "[", i, "]: an empty tensor id"));
  }
  return out;
}

absl::Status NotNegative(int64_t v, const std::string& field) {
  if (v >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("plan: ", field, " is ", v, ", below 0"));
}

}  // namespace

autouvm::v1::Plan ToProto(const Plan& plan, const autouvm::v1::ProfileKey& key) {
  autouvm::v1::Plan out;
  *out.mutable_key() = key;
  out.set_budget_bytes(plan.budget_bytes);
  out.set_window_bytes(plan.window_bytes);
  AddAll(plan.pinned, out.mutable_pinned());
  out.set_pinned_bytes(plan.pinned_bytes);
  out.set_streamed_bytes(plan.streamed_bytes);
  for (const Prefetch& f : plan.prefetches) {
    autouvm::v1::Prefetch* p = out.add_prefetches();
    p->set_for_op(f.for_op);
    p->set_issue_at_op(f.issue_at_op);
    AddAll(f.tensors, p->mutable_tensors());
    p->set_bytes(f.bytes);
  }
  AddAll(plan.remote, out.mutable_remote());
  out.set_remote_bytes(plan.remote_bytes);
  out.set_driver_evicts(plan.driver_evicts);
  AddAll(plan.affinity, out.mutable_affinity());
  out.set_staged(plan.staged);
  out.set_device_buffer(plan.device_buffer);
  return out;
}

absl::StatusOr<Plan> FromProto(const autouvm::v1::Plan& proto) {
  Plan plan;
  plan.budget_bytes = proto.budget_bytes();
  plan.window_bytes = proto.window_bytes();
  plan.pinned_bytes = proto.pinned_bytes();
  plan.streamed_bytes = proto.streamed_bytes();
  plan.remote_bytes = proto.remote_bytes();
  for (const auto& [v, field] : {std::pair{plan.budget_bytes, "budget_bytes"},
                                 {plan.window_bytes, "window_bytes"},
                                 {plan.pinned_bytes, "pinned_bytes"},
                                 {plan.streamed_bytes, "streamed_bytes"},
                                 {plan.remote_bytes, "remote_bytes"}}) {
    if (absl::Status s = NotNegative(v, field); !s.ok()) return s;
  }
  auto pinned = Ids(proto.pinned(), "pinned");
  if (!pinned.ok()) return pinned.status();
  auto remote = Ids(proto.remote(), "remote");
  if (!remote.ok()) return remote.status();
  auto affinity = Ids(proto.affinity(), "affinity");
  if (!affinity.ok()) return affinity.status();
  plan.pinned = *std::move(pinned);
  plan.remote = *std::move(remote);
  plan.affinity = *std::move(affinity);
  plan.prefetches.reserve(static_cast<size_t>(proto.prefetches_size()));
  for (int i = 0; i < proto.prefetches_size(); ++i) {
    const autouvm::v1::Prefetch& p = proto.prefetches(i);
    const std::string where = absl::StrCat("prefetches[", i, "]");
    for (const auto& [v, field] :
         {std::pair{p.for_op(), ".for_op"}, {p.issue_at_op(), ".issue_at_op"}, {p.bytes(), ".bytes"}}) {
      if (absl::Status s = NotNegative(v, where + field); !s.ok()) return s;
    }
    if (p.tensors_size() == 0) return absl::InvalidArgumentError(absl::StrCat("plan: ", where, ": fetches no tensor"));
    auto tensors = Ids(p.tensors(), (where + ".tensors").c_str());
    if (!tensors.ok()) return tensors.status();
    plan.prefetches.push_back({p.for_op(), p.issue_at_op(), *std::move(tensors), p.bytes()});
  }
  plan.driver_evicts = proto.driver_evicts();
  plan.staged = proto.staged();
  plan.device_buffer = proto.device_buffer();
  if (plan.device_buffer && !plan.staged) {
    return absl::InvalidArgumentError("plan: device_buffer is set without staged");
  }
  return plan;
}

}  // namespace autouvm::runtime
