#include "runtime/gpu_spec.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "base/yaml_fields.h"

namespace autouvm::runtime {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;
constexpr double kMiB = 1024.0 * 1024;
constexpr double kUs = 1e-6;

// Note [H200 calibration]: every figure below comes from shared/gpu/NOTES.md ("Measured on the H200",
// PCIe Gen5 x16, driver 580, CUDA 13), solved for the mechanism the simulator models:
//   link        55.4 GB/s: pinned cudaMemcpy, both directions.
//   hbm         4.4 TB/s: read of resident managed memory.
//   launch      7.0 µs = (1.20 ms resident decode pass − 4 GiB / 4.4 TB/s) / 32 kernels.
//   faults, from the sparse-touch figures (20 / 5.6 / 0.66 µs per touch at 2 MiB / 64 KiB / 4 KiB strides)
//   and the lone fault (44 µs including the launch). A touch is one fault entry; a batch holds 256
//   entries and services each block in it once; a page costs its copy at the link rate (1.18 µs per
//   64 KiB) plus fault_page_s. Per touch, with e' = an entry plus its share of the batch cost:
//     2 MiB stride:   page + e' + block                = 20     (one block per touch)
//     64 KiB stride:  page + e' + block / 32           = 5.6    (8 blocks per batch)
//     4 KiB stride:  (page + 16 e' + 2 block / 32) / 16 = 0.66   (a block spans two batches)
//     → block = 14.86 µs, e' = 0.300 µs, page = 4.836 µs = 1.183 copy + 3.653
//     lone fault: launch + batch + entry + page + block = 44 → batch = 17.07 µs, entry = 0.300 − 17.07/256
//   How many fault entries a kernel raises per page is the kernel's, not the driver's: the calibration
//   test gives NOTES.md's probe kernels theirs, the trace replay ATen's (Note [Fault entries per kernel]).
//   prefetch, from 4 GiB / 2 MiB calls at 50.5 / 18.2 GB/s (t = call + blocks · per-block):
//     per block 41.49 µs = 37.86 µs copy + 3.63 µs;  call = 115.2 − 41.49 = 73.7 µs.
//   device→host 10.75 GB/s, pages the GPU wrote or not: the median of 32 trips of 4 GiB to the host in
//     64 MiB prefetches (the emulated eviction's calls) in four processes on 2026-11-30 (offload_bench
//     --probes eviction, bench/results/2026-11-30-dispatch-and-eviction-h200.md) → 6.10 µs per page =
//     1.18 µs copy + 4.91 µs. The trips ran at 8.0–16.0 GB/s from one minute to the next; the written
//     pages' trips (10.0–14.3, median 12.3) lie within the others' (8.0–16.0, median 10.15), so one rate.
//     NOTES.md's single 4 GiB calls had given 16.5 / 12.5 GB/s (written / not), and the replays of stock
//     and paper under the emulated eviction came out 0.77–1.05 of the GPU's steps on 2026-11-30
//     (8 of 32 rows below 0.85).
//   drop        0.13 ms for 128 MiB read-mostly range whose GPU copy is dropped = 2.03 µs per block.
//   host hold   a 1 GiB prefetch to the device held the calling thread for 14.3–27.9 ms of its 21.9–28.0 ms
//               in seven runs of bench/offload_bench's driver probe (0.65–1.00 of it, mean 0.89), issued
//               to an idle stream; queued behind work it returns at once (Note [Prefetches hold the host]).
//   resident    a prefetch of a range already on the device (its link probe, 1 GiB in calls of 2 / 64 MiB):
//               4.3 / 88.8 µs of the stream and 4.3 / 29.4 µs of the calling thread per call
//               → 1.57 µs + 2.73 µs per block (stream); 1.57 µs + 0.81 µs per block (thread, ±1 µs).
//   remote      51.3 GB/s, GPU reads of host memory mapped in place; 47.9 GB/s by matrix products — the
//               GEMV/GEMM ops of the 7B and 13B decode steps read their remote weights at 46.0–49.7 GB/s
//               (mean 47.9) in bench/offload_bench --op-times (bench/results/2026-11-29-offload-h200.md).
//   staged      bench/offload_bench's staged probes (2026-11-30). One 1 GiB range: the pinned copy into
//               it runs at 50.2–51.3 GB/s (mean 50.7; 55.5 into device memory), populating it by a prefetch
//               takes 1.2–1.3 ms, a discard 3.3–3.9 ms. In the executor's pattern (the ring probe: 24 ranges
//               of 128 MiB brought in two ahead of a kernel reading each) populate + copy take 74.9 ms
//               without discards → 7.4 µs per block besides the copy, and discards on the compute stream
//               add 7.6 ms although the copy stream never waits for them → 4.9 µs per block, which the
//               copies in flight lose too (the driver does one thing at a time).
//               Pipelined, staged copies reach 39–40 GB/s: less than a remote read (47.9) unless other
//               work hides them (Note [Staged or in place], profiler/planner.cc).
// TorchScript issuing one op on the H200 host (the Observer installed): resident Llama decode steps took
// 3.15 ms for 230 ops (dim 4096, 4 layers) and 13.68 ms for 1166 ops (dim 2048, 22 layers), medians of
// 5, with kernels worth less: (3.15 + 13.68) ms / 1396 ops = 12.1 µs per op (bench/uvm_sim_check,
// bench/results/2026-11-29-sim-vs-h200.md; an earlier run of the first model gave 19 µs: host noise).
constexpr double kTorchScriptOpS = 12.1 * kUs;

UvmCosts H200HostUvmCosts() {
  UvmCosts c;
  c.fault_batch_s = 17.07 * kUs;
  c.fault_entry_s = 0.233 * kUs;
  c.fault_page_s = 3.653 * kUs;
  c.fault_block_s = 14.86 * kUs;
  c.prefetch_call_s = 73.7 * kUs;
  c.prefetch_host_hold = 0.89;
  c.prefetch_resident_call_s = 1.57 * kUs;
  c.prefetch_resident_block_s = 2.73 * kUs;
  c.prefetch_resident_host_block_s = 0.81 * kUs;
  c.prefetch_block_s = 3.63 * kUs;
  c.d2h_page_s = 4.91 * kUs;
  c.d2h_clean_page_s = 4.91 * kUs;
  c.drop_block_s = 2.03 * kUs;
  c.remote_bytes_per_s = 51.3e9;
  c.remote_matrix_bytes_per_s = 47.9e9;
  c.staged_copy_bytes_per_s = 50.7e9;
  c.populate_block_s = 7.4 * kUs;
  c.discard_block_s = 4.9 * kUs;
  return c;
}

// Other GPUs: device figures from the vendors' datasheets. Their hosts were not measured: the driver's
// per-fault and per-call costs are host-side work and are taken from the H200 host; zero-copy reads keep
// the H200 host's ratio to the copy roof (51.3 / 55.4), and so do staged copies (50.7 / 55.4).
GpuSpec FromDatasheet(std::string name, std::string description, double memory_bytes, double hbm, double flops,
                      double link) {
  GpuSpec s;
  s.name = std::move(name);
  s.description = std::move(description);
  s.memory_bytes = static_cast<int64_t>(memory_bytes);
  s.hbm_bytes_per_s = hbm;
  s.peak_flops = flops;
  s.link_bytes_per_s = link;
  s.kernel_launch_s = 7.0 * kUs;
  s.framework_op_s = kTorchScriptOpS;
  s.uvm = H200HostUvmCosts();
  s.uvm.remote_bytes_per_s = link * (51.3 / 55.4);
  s.uvm.remote_matrix_bytes_per_s = link * (47.9 / 55.4);
  s.uvm.staged_copy_bytes_per_s = link * (50.7 / 55.4);
  return s;
}

std::vector<GpuSpec> MakeBuiltins() {
  std::vector<GpuSpec> specs;
  GpuSpec h200;
  h200.name = "h200-pcie5";
  h200.description = "NVIDIA H200 141 GB on PCIe Gen5 x16, calibrated on the project's GPU host";
  h200.memory_bytes = static_cast<int64_t>(141e9);  // datasheet: 141 GB HBM3e
  h200.hbm_bytes_per_s = 4.4e12;                    // measured (NOTES.md); datasheet 4.8 TB/s
  h200.peak_flops = 835e12;                         // H200 NVL datasheet: 1,671 TFLOP/s bf16 sparse, half dense
  h200.link_bytes_per_s = 55.4e9;                   // measured pinned copies (NOTES.md)
  h200.kernel_launch_s = 7.0 * kUs;                 // Note [H200 calibration]
  h200.framework_op_s = kTorchScriptOpS;
  // runtime/cuda/weight_decode.h on one 7B layer of N(0, 0.02^2) weights, bf16 out
  // (bench/results/2026-12-03-weight-decode-h200.md).
  h200.decode_bytes_per_s = 507e9;
  h200.uvm = H200HostUvmCosts();
  specs.push_back(h200);
  // H100 PCIe 80 GB: 2.0 TB/s HBM2e, 756 TFLOP/s dense bf16; Gen5 x16 link as measured on the H200 host.
  specs.push_back(FromDatasheet("h100-pcie5", "NVIDIA H100 PCIe 80 GB, PCIe Gen5 x16 (datasheet)", 80 * kGiB, 2.0e12,
                                756e12, 55.4e9));
  // A100 PCIe 80 GB: 1,935 GB/s HBM2e, 312 TFLOP/s dense bf16; Gen4 x16 = 31.5 GB/s raw per direction, of
  // which pinned copies reach about 80%.
  specs.push_back(FromDatasheet("a100-pcie4", "NVIDIA A100 PCIe 80 GB, PCIe Gen4 x16 (datasheet)", 80 * kGiB, 1.935e12,
                                312e12, 25e9));
  // GeForce RTX 3060 12 GB: 360 GB/s GDDR6, 25.6 TFLOP/s dense bf16 with fp32 accumulation (GA106);
  // a consumer board's Gen4 link reaches about 20 GB/s in practice.
  specs.push_back(FromDatasheet("rtx3060-pcie4", "NVIDIA GeForce RTX 3060 12 GB, PCIe Gen4 (datasheet)", 12 * kGiB,
                                360e9, 25.6e12, 20e9));
  return specs;
}

absl::Status ReadSpec(const YAML::Node& node, const std::string& path, GpuSpec* spec) {
  base::YamlFields f(node, path);
  double memory_gib = spec->memory_bytes / kGiB, hbm = spec->hbm_bytes_per_s / 1e9, tflops = spec->peak_flops / 1e12,
         link = spec->link_bytes_per_s / 1e9, launch_us = spec->kernel_launch_s / kUs,
         framework_us = spec->framework_op_s / kUs, decode = spec->decode_bytes_per_s / 1e9;
  std::string ignored;
  f.String("name", &ignored);
  f.String("base", &ignored);
  f.String("description", &spec->description);
  f.Double("memory_gib", &memory_gib, 1.0 / 1024, 1 << 20);
  f.Double("hbm_gb_per_s", &hbm, 1e-3, 1e6);
  f.Double("peak_tflops", &tflops, 1e-3, 1e6);
  f.Double("link_gb_per_s", &link, 1e-3, 1e5);
  f.Double("kernel_launch_us", &launch_us, 0, 1e6);
  f.Double("framework_op_us", &framework_us, 0, 1e6);
  f.Double("decode_gb_per_s", &decode, 0, 1e6);
  UvmCosts& u = spec->uvm;
  struct Micro {
    const char* key;
    double* seconds;
  };
  double remote = u.remote_bytes_per_s / 1e9;
  double remote_matrix = u.remote_matrix_bytes_per_s / 1e9;
  double staged = u.staged_copy_bytes_per_s / 1e9;
  base::YamlFields fu(f.Map("uvm"), f.PathOf("uvm"));
  for (Micro m : {Micro{"fault_batch_us", &u.fault_batch_s}, Micro{"fault_entry_us", &u.fault_entry_s},
                  Micro{"fault_page_us", &u.fault_page_s}, Micro{"fault_block_us", &u.fault_block_s},
                  Micro{"prefetch_call_us", &u.prefetch_call_s}, Micro{"prefetch_block_us", &u.prefetch_block_s},
                  Micro{"d2h_page_us", &u.d2h_page_s}, Micro{"d2h_clean_page_us", &u.d2h_clean_page_s},
                  Micro{"drop_block_us", &u.drop_block_s}, Micro{"populate_block_us", &u.populate_block_s},
                  Micro{"discard_block_us", &u.discard_block_s}}) {
    double us = *m.seconds / kUs;
    fu.Double(m.key, &us, 0, 1e6);
    *m.seconds = us * kUs;
  }
  fu.Double("remote_gb_per_s", &remote, 1e-3, 1e5);
  fu.Double("remote_matrix_gb_per_s", &remote_matrix, 0, 1e5);
  fu.Double("staged_copy_gb_per_s", &staged, 0, 1e5);
  fu.Double("prefetch_host_hold", &u.prefetch_host_hold, 0, 1);
  for (Micro m : {Micro{"prefetch_resident_call_us", &u.prefetch_resident_call_s},
                  Micro{"prefetch_resident_block_us", &u.prefetch_resident_block_s},
                  Micro{"prefetch_resident_host_block_us", &u.prefetch_resident_host_block_s}}) {
    double us = *m.seconds / kUs;
    fu.Double(m.key, &us, 0, 1e6);
    *m.seconds = us * kUs;
  }
  RETURN_IF_ERROR(fu.Finish());
  RETURN_IF_ERROR(f.Finish());
  spec->memory_bytes = static_cast<int64_t>(memory_gib * kGiB);
  spec->hbm_bytes_per_s = hbm * 1e9;
  spec->peak_flops = tflops * 1e12;
  spec->link_bytes_per_s = link * 1e9;
  spec->kernel_launch_s = launch_us * kUs;
  spec->framework_op_s = framework_us * kUs;
  spec->decode_bytes_per_s = decode * 1e9;
  u.remote_bytes_per_s = remote * 1e9;
  u.remote_matrix_bytes_per_s = remote_matrix * 1e9;
  u.staged_copy_bytes_per_s = staged * 1e9;
  return absl::OkStatus();
}

}  // namespace

const std::vector<GpuSpec>& BuiltinGpuSpecs() {
  static const std::vector<GpuSpec>* const kSpecs = new std::vector<GpuSpec>(MakeBuiltins());
  return *kSpecs;
}

GpuSpec WithDeviceToHostRate(GpuSpec spec, double bytes_per_s) {
  constexpr double kPageBytes = 64 << 10;  // what UvmCosts' d2h costs are per
  if (bytes_per_s <= 0 || spec.link_bytes_per_s <= 0) return spec;
  const double beside_copy = std::max(0.0, kPageBytes / bytes_per_s - kPageBytes / spec.link_bytes_per_s);
  spec.uvm.d2h_page_s = beside_copy;
  spec.uvm.d2h_clean_page_s = beside_copy;
  return spec;
}

absl::StatusOr<GpuSpec> FindGpuSpec(std::string_view name) {
  std::vector<std::string> names;
  for (const GpuSpec& s : BuiltinGpuSpecs()) {
    if (s.name == name) return s;
    names.push_back(s.name);
  }
  return absl::NotFoundError(
      absl::StrCat("unknown GPU spec \"", std::string(name), "\" (built in: ", absl::StrJoin(names, ", "), ")"));
}

absl::StatusOr<std::vector<GpuSpec>> ParseGpuSpecs(std::string_view yaml) {
  ASSIGN_OR_RETURN(YAML::Node root, base::ParseYamlDocument(std::string(yaml), "GPU specs"));
  if (!root.IsMap()) return absl::InvalidArgumentError("GPU specs: expected a mapping with a `gpus` list");
  for (const auto& kv : root) {
    if (kv.first.Scalar() != "gpus") {
      return absl::InvalidArgumentError(absl::StrCat("GPU specs: unknown key `", kv.first.Scalar(), "`"));
    }
  }
  const YAML::Node gpus = root["gpus"];
  if (!gpus.IsSequence()) return absl::InvalidArgumentError("GPU specs: `gpus` must be a list of specs");
  std::vector<GpuSpec> out;
  for (size_t i = 0; i < gpus.size(); ++i) {
    const YAML::Node& node = gpus[i];
    const std::string path = absl::StrCat("gpus[", i, "]");
    if (!node.IsMap()) return absl::InvalidArgumentError(absl::StrCat(path, ": must be a mapping"));
    if (!node["name"] || !node["name"].IsScalar() || node["name"].Scalar().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ".name: required"));
    }
    GpuSpec spec;
    if (node["base"]) {
      auto base = FindGpuSpec(node["base"].Scalar());
      if (!base.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ".base: ", base.status().message()));
      spec = *base;
    }
    spec.name = node["name"].Scalar();
    RETURN_IF_ERROR(ReadSpec(node, path, &spec));
    if (spec.memory_bytes <= 0 || spec.hbm_bytes_per_s <= 0 || spec.peak_flops <= 0 || spec.link_bytes_per_s <= 0 ||
        spec.uvm.remote_bytes_per_s <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, " (", spec.name,
                       "): memory_gib, hbm_gb_per_s, peak_tflops, link_gb_per_s and uvm.remote_gb_per_s are required "
                       "without a base"));
    }
    out.push_back(std::move(spec));
  }
  return out;
}

}  // namespace autouvm::runtime
