# Every third-party dependency, found once. Order matters (../shared/gpu/NOTES.md): Protobuf and gRPC
# before Torch, because TorchConfig defines an empty protobuf::libprotobuf target.
find_package(Threads REQUIRED)
find_package(Protobuf REQUIRED)
find_package(gRPC CONFIG REQUIRED)
find_package(absl CONFIG REQUIRED)
find_package(Torch REQUIRED)
find_package(yaml-cpp CONFIG REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(SENTENCEPIECE REQUIRED IMPORTED_TARGET sentencepiece)

# RocksDB's own CMake config drags in gflags/Snappy configs that break outside /usr.
find_library(ROCKSDB_LIBRARY rocksdb REQUIRED)
find_path(ROCKSDB_INCLUDE_DIR rocksdb/db.h REQUIRED)
add_library(autouvm_rocksdb INTERFACE)
target_link_libraries(autouvm_rocksdb INTERFACE ${ROCKSDB_LIBRARY})
target_include_directories(autouvm_rocksdb SYSTEM INTERFACE ${ROCKSDB_INCLUDE_DIR})

find_program(GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)

# libtorch as one interface target; TORCH_CXX_FLAGS carries the C++ ABI define.
add_library(autouvm_torch INTERFACE)
target_link_libraries(autouvm_torch INTERFACE ${TORCH_LIBRARIES})
separate_arguments(_torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
target_compile_options(autouvm_torch INTERFACE ${_torch_flags})

# Protobuf by file, not by target (see the ordering note above).
add_library(autouvm_protobuf INTERFACE)
# Every executable loads libprotobuf before anything else (see the note named below).
get_filename_component(_protobuf_dir "${Protobuf_LIBRARY}" DIRECTORY)
string(APPEND CMAKE_EXE_LINKER_FLAGS " -Wl,--no-as-needed -L${_protobuf_dir} -lprotobuf -Wl,--as-needed")
# --no-as-needed keeps libprotobuf early in the load order even in binaries that do not call it
# directly: see Note [sentencepiece's bundled protobuf] in server/CMakeLists.txt.
target_link_libraries(autouvm_protobuf INTERFACE "-Wl,--push-state,--no-as-needed" ${Protobuf_LIBRARIES} "-Wl,--pop-state")
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
