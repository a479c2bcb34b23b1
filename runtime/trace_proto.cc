#include "runtime/trace_proto.h"

namespace autouvm::runtime {
namespace {

void ToProto(const std::vector<TensorUse>& uses, google::protobuf::RepeatedPtrField<autouvm::v1::TensorUse>* out) {
  for (const auto& u : uses) {
    auto* p = out->Add();
    p->set_id(u.id);
    p->set_bytes(u.bytes);
    p->set_offset(u.offset);
    p->set_extent(u.extent);
    p->set_run(u.run);
  }
}

std::vector<TensorUse> FromProto(const google::protobuf::RepeatedPtrField<autouvm::v1::TensorUse>& uses) {
  std::vector<TensorUse> out;
  out.reserve(uses.size());
  for (const auto& u : uses) out.push_back({u.id(), u.bytes(), u.offset(), u.extent(), u.run()});
  return out;
}

}  // namespace

autouvm::v1::AccessTrace ToProto(const AccessTrace& trace) {
  autouvm::v1::AccessTrace out;
  for (const auto& op : trace.ops) {
    auto* p = out.add_ops();
    p->set_index(op.index);
    p->set_op(op.op);
    p->set_kernel(op.kernel);
    ToProto(op.reads, p->mutable_reads());
    ToProto(op.writes, p->mutable_writes());
    p->set_flops(op.flops);
    p->set_seconds(op.seconds);
  }
  ToProto(trace.named, out.mutable_named());
  for (const auto& [id, bytes] : trace.coded_bytes) (*out.mutable_coded_bytes())[id] = bytes;
  return out;
}

AccessTrace FromProto(const autouvm::v1::AccessTrace& proto) {
  AccessTrace out;
  out.ops.reserve(proto.ops_size());
  for (const auto& p : proto.ops()) {
    out.ops.push_back(
        {p.index(), p.op(), p.kernel(), FromProto(p.reads()), FromProto(p.writes()), p.flops(), p.seconds()});
  }
  out.named = FromProto(proto.named());
  for (const auto& [id, bytes] : proto.coded_bytes()) out.coded_bytes[id] = bytes;
  return out;
}

}  // namespace autouvm::runtime
