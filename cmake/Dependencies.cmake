# Every third-party dependency, found once. Order matters (../shared/gpu/NOTES.md): Protobuf and gRPC
# before Torch, because TorchConfig defines an empty protobuf::libprotobuf target.
find_package(Threads REQUIRED)
find_package(Protobuf REQUIRED)
find_package(gRPC CONFIG REQUIRED)
find_package(absl CONFIG REQUIRED)
find_package(Torch REQUIRED)
find_package(yaml-cpp CONFIG REQUIRED)
find_package(spdlog CONFIG REQUIRED)  # base/log.cc
find_package(nlohmann_json CONFIG REQUIRED)
find_package(OpenSSL REQUIRED)  # SHA-256 of model files and stored values
find_package(ICU REQUIRED COMPONENTS uc i18n)  # tokenizer.json: Unicode regexes and NFC (tokenizer/bpe_tokenizer.h)

# RocksDB's own CMake config drags in gflags/Snappy configs that break outside /usr.
find_library(ROCKSDB_LIBRARY rocksdb REQUIRED)
find_path(ROCKSDB_INCLUDE_DIR rocksdb/db.h REQUIRED)
add_library(autouvm_rocksdb INTERFACE)
target_link_libraries(autouvm_rocksdb INTERFACE ${ROCKSDB_LIBRARY})
target_include_directories(autouvm_rocksdb SYSTEM INTERFACE ${ROCKSDB_INCLUDE_DIR})

# sentencepiece by file too: its .pc file hard-codes /usr, which is wrong where the packages are unpacked
# elsewhere (the GPU host's /opt/deps).
find_library(SENTENCEPIECE_LIBRARY sentencepiece REQUIRED)
find_library(SENTENCEPIECE_TRAIN_LIBRARY sentencepiece_train REQUIRED)
find_path(SENTENCEPIECE_INCLUDE_DIR sentencepiece_processor.h REQUIRED)
add_library(autouvm_sentencepiece_lib INTERFACE)
target_link_libraries(autouvm_sentencepiece_lib INTERFACE ${SENTENCEPIECE_TRAIN_LIBRARY} ${SENTENCEPIECE_LIBRARY})
target_include_directories(autouvm_sentencepiece_lib SYSTEM INTERFACE ${SENTENCEPIECE_INCLUDE_DIR})

# The metrics endpoint: prometheus-cpp's core (registry, text format) and cpp-httplib (Debian builds its
# implementation into a shared library). By file, for the same reason as sentencepiece.
find_library(PROMETHEUS_CORE_LIBRARY prometheus-cpp-core REQUIRED)
find_path(PROMETHEUS_INCLUDE_DIR prometheus/registry.h REQUIRED)
find_library(HTTPLIB_LIBRARY cpp-httplib REQUIRED)
find_path(HTTPLIB_INCLUDE_DIR httplib.h REQUIRED)
add_library(autouvm_metrics_deps INTERFACE)
target_link_libraries(autouvm_metrics_deps INTERFACE ${PROMETHEUS_CORE_LIBRARY} ${HTTPLIB_LIBRARY})
target_include_directories(autouvm_metrics_deps SYSTEM INTERFACE ${PROMETHEUS_INCLUDE_DIR} ${HTTPLIB_INCLUDE_DIR})

find_program(GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)

# Note [libstdc++ first]: libraries of the PyTorch wheel on the GPU host export copies of libstdc++
# functions (nm shows libtorch_cpu.so defining std::filesystem ones). libstdc++ comes last on a link
# line by default, so such copies capture our own calls into libstdc++: there, every test that touched
# files crashed through a null function pointer, and LD_PRELOAD of the system libstdc++ cured it. Naming libstdc++ first, by its soname (plain -lstdc++ may find only a static archive there),
# makes the system's copy win.
string(APPEND CMAKE_EXE_LINKER_FLAGS " -Wl,--push-state,--no-as-needed,-l:libstdc++.so.6,--pop-state")

# libtorch as one interface target; TORCH_CXX_FLAGS carries the C++ ABI define.
add_library(autouvm_torch INTERFACE)
target_link_libraries(autouvm_torch INTERFACE ${TORCH_LIBRARIES})
separate_arguments(_torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
target_compile_options(autouvm_torch INTERFACE ${_torch_flags})

# Protobuf by file, not by target (see the ordering note above).
add_library(autouvm_protobuf INTERFACE)
target_link_libraries(autouvm_protobuf INTERFACE ${Protobuf_LIBRARIES})
target_include_directories(autouvm_protobuf SYSTEM INTERFACE ${Protobuf_INCLUDE_DIRS})

if(AUTOUVM_WITH_CUDA)
  if(TORCH_CUDA_LIBRARIES OR CUDA_FOUND OR TARGET torch_cuda)
    set(AUTOUVM_CUDA ON)
    message(STATUS "autouvmd: libtorch has CUDA, building the CUDA backend")
  else()
    set(AUTOUVM_CUDA OFF)
    message(STATUS "autouvmd: libtorch has no CUDA, building the CPU/sim backends only")
  endif()
endif()

# The CUDA toolkit alone (no libtorch CUDA needed) builds the CUDA backend's UVM calls and CUPTI
# counters, so that they compile on every machine that has the toolkit, CI's included.
set(AUTOUVM_CUDA_TOOLKIT OFF)
if(AUTOUVM_WITH_CUDA)
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND AND TARGET CUDA::cupti)
    set(AUTOUVM_CUDA_TOOLKIT ON)
    message(STATUS "autouvmd: CUDA toolkit ${CUDAToolkit_VERSION}: building the CUDA backend's UVM and CUPTI parts")
  endif()
endif()

# The CUDA kernels (runtime/cuda/weight_decode_kernel.cu), wherever the toolkit's compiler works: CI
# compiles them; the GPU host runs them (tests/gpu). For the H200 (sm_90) unless the build says otherwise.
set(AUTOUVM_CUDA_KERNELS OFF)
if(AUTOUVM_CUDA_TOOLKIT)
  include(CheckLanguage)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    set(AUTOUVM_CUDA_KERNELS ON)
    message(STATUS "autouvmd: CUDA compiler ${CMAKE_CUDA_COMPILER}: building the CUDA kernels for ${CMAKE_CUDA_ARCHITECTURES}")
  endif()
endif()
