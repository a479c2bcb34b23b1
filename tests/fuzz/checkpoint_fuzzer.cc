// libFuzzer target: a checkpoint file as autouvm-convert reads it (tools/safetensors.h). The input is
// the whole file, read through a memory file; never crashes, and every tensor of a file that opens lies
// within it (each of its bytes is read).
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "tools/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int fd = memfd_create("checkpoint", 0);
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  if (fd < 0 || ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) std::abort();
  auto file = autouvm::tools::SafetensorsFile::Open(path);
  if (!file.ok()) return 0;
  uint64_t sum = 0;
  for (const std::string& name : (*file)->names()) {
    auto view = (*file)->View(name);
    if (!view.ok() || view->bytes != view->numel() * autouvm::tools::FindSafetensorsDtype(view->dtype)->bytes) {
      std::abort();
    }
    for (int64_t i = 0; i < view->bytes; ++i) sum += view->data[i];
  }
  static volatile uint64_t sink;
  sink = sum;
  return 0;
}
