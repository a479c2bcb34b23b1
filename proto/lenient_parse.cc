#include "proto/lenient_parse.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/dynamic_message.h>
#include <google/protobuf/stubs/common.h>
#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/unknown_field_set.h>

#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace autouvm::proto {
namespace {

namespace pb = google::protobuf;

// The unknown field that carries a defect: the largest field number protobuf allows, which no schema of
// ours uses.
constexpr int kDefectField = 536870911;

// A copy of a message type's schema in which every string field is bytes (so nothing checks UTF-8).
class BytesTwins {
 public:
  static BytesTwins& Get() {
    static BytesTwins* const kTwins = new BytesTwins();
    return *kTwins;
  }

  // The twin's prototype for `type`; null if the schema could not be copied.
  const pb::Message* Prototype(const pb::Descriptor* type) {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = prototypes_.find(type); it != prototypes_.end()) return it->second;
    AddFile(type->file());
    const pb::Descriptor* twin = pool_.FindMessageTypeByName(type->full_name());
    const pb::Message* prototype = twin != nullptr ? factory_.GetPrototype(twin) : nullptr;
    prototypes_[type] = prototype;
    return prototype;
  }

 private:
  BytesTwins() : factory_(&pool_) {}

  static void ToBytes(pb::DescriptorProto* m) {
    // A map's entries become a repeated message of their own (the same wire format): a map's key may not be
    // bytes, and a schema with one would not build, leaving every request of the file and of the files
    // that import it without a twin.
    if (m->options().map_entry()) m->mutable_options()->clear_map_entry();
    for (pb::FieldDescriptorProto& f : *m->mutable_field()) {
      if (f.type() == pb::FieldDescriptorProto::TYPE_STRING) f.set_type(pb::FieldDescriptorProto::TYPE_BYTES);
    }
    for (pb::DescriptorProto& nested : *m->mutable_nested_type()) ToBytes(&nested);
  }

  void AddFile(const pb::FileDescriptor* file) {
    if (pool_.FindFileByName(file->name()) != nullptr) return;
    for (int i = 0; i < file->dependency_count(); ++i) AddFile(file->dependency(i));
    pb::FileDescriptorProto copy;
    file->CopyTo(&copy);
    for (pb::DescriptorProto& m : *copy.mutable_message_type()) ToBytes(&m);
    pool_.BuildFile(copy);  // null on failure: Prototype() then finds no twin
  }

  std::mutex mu_;
  pb::DescriptorPool pool_;
  pb::DynamicMessageFactory factory_;
  std::map<const pb::Descriptor*, const pb::Message*> prototypes_;
};

// Where the first byte that does not begin a valid UTF-8 sequence is (overlong forms, surrogates and
// code points past U+10FFFF are invalid, as for protobuf).
size_t FirstInvalidByte(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    int n = 0;
    uint32_t cp = 0, min = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      n = 1, cp = c & 0x1f, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
      n = 2, cp = c & 0x0f, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
      n = 3, cp = c & 0x07, min = 0x10000;
    } else {
      return i;
    }
    for (int k = 1; k <= n; ++k) {
      if (i + k >= s.size()) return i;
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xc0) != 0x80) return i;
      cp = (cp << 6) | (cc & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return i;
    i += static_cast<size_t>(n) + 1;
  }
  return s.size();
}

// Empties the twin's strings that are not UTF-8 (fields that are strings in `original`), and says which
// was the first ("" if none).
std::string EmptyInvalidStrings(pb::Message* twin, const pb::Descriptor* original, const std::string& prefix) {
  std::string first;
  const pb::Reflection* r = twin->GetReflection();
  std::vector<const pb::FieldDescriptor*> fields;
  r->ListFields(*twin, &fields);
  for (const pb::FieldDescriptor* f : fields) {
    const pb::FieldDescriptor* o = original->FindFieldByNumber(f->number());
    if (o == nullptr) continue;
    const std::string path = prefix + f->name();
    if (o->type() == pb::FieldDescriptor::TYPE_STRING) {
      const int n = f->is_repeated() ? r->FieldSize(*twin, f) : 1;
      for (int k = 0; k < n; ++k) {
        const std::string v = f->is_repeated() ? r->GetRepeatedString(*twin, f, k) : r->GetString(*twin, f);
        if (pb::internal::IsStructurallyValidUTF8(v.data(), static_cast<int>(v.size()))) continue;
        if (first.empty()) {
          first = (f->is_repeated() ? path + "[" + std::to_string(k) + "]" : path) + ": not valid UTF-8 at byte " +
                  std::to_string(FirstInvalidByte(v));
        }
        if (f->is_repeated()) {
          r->SetRepeatedString(twin, f, k, "");
        } else {
          r->SetString(twin, f, "");
        }
      }
    } else if (o->type() == pb::FieldDescriptor::TYPE_MESSAGE) {
      const int n = f->is_repeated() ? r->FieldSize(*twin, f) : 1;
      for (int k = 0; k < n; ++k) {
        pb::Message* sub = f->is_repeated() ? r->MutableRepeatedMessage(twin, f, k) : r->MutableMessage(twin, f);
        const std::string at = f->is_repeated() ? path + "[" + std::to_string(k) + "]." : path + ".";
        std::string inner = EmptyInvalidStrings(sub, o->message_type(), at);
        if (first.empty()) first = std::move(inner);
      }
    }
  }
  return first;
}

void MarkDefect(google::protobuf::Message* msg, const std::string& defect) {
  pb::UnknownFieldSet* unknown = msg->GetReflection()->MutableUnknownFields(msg);
  unknown->DeleteByNumber(kDefectField);  // a client's own field of that number
  unknown->AddLengthDelimited(kDefectField, defect);
}

}  // namespace

void LenientParse(const std::string& bytes, google::protobuf::Message* msg) {
  // protobuf logs an error for every string that is not UTF-8: a client could fill the daemon's log.
  // The client hears of it instead (silenced while this thread parses; other threads' protobuf
  // messages in that instant too, which are of the same kind).
  pb::LogSilencer quiet;
  if (msg->ParseFromString(bytes)) {
    // A defect is ours to attach: a client's own field of that number is dropped.
    msg->GetReflection()->MutableUnknownFields(msg)->DeleteByNumber(kDefectField);
    return;
  }
  msg->Clear();
  const std::string unparsable = "the request does not parse as " + msg->GetDescriptor()->full_name();
  const pb::Message* prototype = BytesTwins::Get().Prototype(msg->GetDescriptor());
  if (prototype == nullptr) return MarkDefect(msg, unparsable);
  std::unique_ptr<pb::Message> twin(prototype->New());
  if (!twin->ParseFromString(bytes)) return MarkDefect(msg, unparsable);
  std::string defect = EmptyInvalidStrings(twin.get(), msg->GetDescriptor(), "");
  if (defect.empty() || !msg->ParseFromString(twin->SerializeAsString())) {
    msg->Clear();
    defect = unparsable;
  }
  MarkDefect(msg, defect);
}

std::string RequestDefect(const google::protobuf::Message& msg) {
  const pb::UnknownFieldSet& unknown = msg.GetReflection()->GetUnknownFields(msg);
  for (int i = 0; i < unknown.field_count(); ++i) {
    const pb::UnknownField& f = unknown.field(i);
    if (f.number() == kDefectField && f.type() == pb::UnknownField::TYPE_LENGTH_DELIMITED) {
      return f.length_delimited();
    }
  }
  return "";
}

std::string BufferBytes(grpc::ByteBuffer* buffer) {
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (!buffer->Dump(&slices).ok()) return bytes;
  for (const grpc::Slice& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return bytes;
}

}  // namespace autouvm::proto
