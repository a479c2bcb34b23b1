// The C interface between autouvmd and its sentencepiece plugin (libautouvm_sentencepiece.so).
//
// Note [sentencepiece plugin]: Debian's libsentencepiece carries a private copy of protobuf-lite 3.14
// and exports its symbols. In a process that also has libprotobuf 3.21 (gRPC, libtorch), whichever
// loads first captures the other's calls: sentencepiece first crashes protobuf's static initialisation;
// protobuf first makes sentencepiece's version check fail (FatalException on Load and Train). Its
// header also cannot share a translation unit with Debian's Abseil (both declare absl::string_view).
// RTLD_DEEPBIND is not enough either: the plugin then writes to libstdc++'s own std::cerr rather than
// the executable's copy-relocated one, and crashes. So the tokenizer (sentencepiece_model.cc) loads it with
// dlmopen(LM_ID_NEWLM): a separate link-map namespace with its own libstdc++ and protobuf, and nothing
// shared. Only plain C types cross, and memory is always owned by the side that allocated it.
#pragma once

#include <stddef.h>

extern "C" {

// Every function returns 0 on success; on failure it writes a NUL-terminated message into err (at most
// err_cap bytes) and returns -1. A buffer that is too small returns 1 and sets *needed.
struct AutouvmSentencePieceApi {
  int version;  // kAutouvmSentencePieceApiVersion
  int (*load)(const char* path, void** model, char* err, size_t err_cap);
  void (*release)(void* model);
  int (*encode)(const void* model, const char* text, size_t text_len, int* ids, size_t ids_cap, size_t* needed,
                char* err, size_t err_cap);
  int (*decode)(const void* model, const int* ids, size_t n_ids, char* text, size_t text_cap, size_t* needed);
  int (*piece_count)(const void* model);
  int (*train)(const char* args, char* err, size_t err_cap);
};

const struct AutouvmSentencePieceApi* autouvm_sentencepiece_api(void);

}  // extern "C"

inline constexpr int kAutouvmSentencePieceApiVersion = 1;
