# syntax=docker/dockerfile:1
# autouvmd on the GPU (runtime.backend: cuda): a CUDA 13 image, libtorch with CUDA from the PyTorch
# wheel (as on the GPU host, ../shared/gpu/NOTES.md), the other dependencies Debian 12's packages
# (tools/debian-packages.txt, unpacked beside the CUDA image's Ubuntu the way the GPU host does), built
# by the same script as the CPU image (tools/build.sh --installed). For the CPU image see
# deploy/Dockerfile.cpu.
#
#   docker build -t autouvmd:cuda .
#   docker run --gpus all -p 50051:50051 -p 9090:9090 -v models:/models -v state:/state \
#     -e AUTOUVM_MAX_MANAGED_BYTES=$((96 << 30)) autouvmd:cuda

ARG CUDA_IMAGE=nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04
ARG RUNTIME_IMAGE=nvidia/cuda:13.0.1-cudnn-runtime-ubuntu24.04
ARG TORCH_INDEX=https://download.pytorch.org/whl/cu130

FROM debian:12 AS debs
# Debian 12's .debs of the C++ dependencies (the build list tools/install-deps.sh installs, less the
# toolchain and libtorch, which the CUDA image and the wheel bring), downloaded for unpacking into /opt/deps.
COPY tools/debian-packages.txt /deps/
RUN apt-get update -qq && mkdir -p /deps/debs && cd /deps/debs \
 && grep -v -E '^\s*(#|$)' /deps/debian-packages.txt \
    | grep -v -E '^(build-essential|cmake|ninja-build|ccache|pkg-config|libtorch-dev|libopenblas0-pthread)$' \
    | xargs apt-get download -qq \
 && apt-get download -qq $(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
      --no-breaks --no-replaces --no-enhances libgrpc++-dev librocksdb-dev libsentencepiece-dev \
      prometheus-cpp-dev libcpp-httplib-dev libyaml-cpp-dev libabsl-dev libicu-dev libspdlog-dev | grep '^lib' | sort -u) 2>/dev/null || true

FROM ${CUDA_IMAGE} AS build
ARG TORCH_INDEX
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends cmake ninja-build g++ python3-pip \
 && pip3 install --break-system-packages --index-url ${TORCH_INDEX} torch && rm -rf /var/lib/apt/lists/*
COPY --from=debs /deps/debs /deps/debs
RUN mkdir -p /opt/deps && for f in /deps/debs/*.deb; do dpkg -x "$f" /opt/deps; done
WORKDIR /src
COPY . /src
# The CPU image's build step (tools/build.sh --installed: Release, what `cmake --install` installs, no
# tests), the packages skipped (they are in /opt/deps) and libtorch's and /opt/deps' prefixes added.
RUN TORCH_PREFIX=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)') \
 && AUTOUVM_SKIP_DEPS=1 BUILD_DIR=/src/build-image BUILD_TYPE=Release JOBS="$(nproc)" \
    CMAKE_ARGS="-DCMAKE_PREFIX_PATH=$TORCH_PREFIX;/opt/deps/usr -DCMAKE_CUDA_ARCHITECTURES=80;90" \
    ./tools/build.sh --installed \
 && cmake --install build-image --prefix /opt/autouvmd \
 && sed -i 's/^  backend: cpu .*/  backend: cuda/' /opt/autouvmd/etc/autouvmd/autouvmd.container.yaml \
 && mkdir -p /opt/autouvmd/lib/torch && cp -a "$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')/lib/." /opt/autouvmd/lib/torch/

FROM ${RUNTIME_IMAGE}
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends curl libgomp1 && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/deps/usr/lib/x86_64-linux-gnu /opt/deps/lib
COPY --from=build /opt/autouvmd /opt/autouvmd
ENV LD_LIBRARY_PATH=/opt/autouvmd/lib/torch:/opt/deps/lib
# The user and its group are both 10001, the ids USER names (so /models and /state belong to that group).
RUN groupadd --system --gid 10001 autouvmd \
 && useradd --system --uid 10001 --gid 10001 --home-dir /state --no-create-home autouvmd \
 && mkdir -p /models /state /etc/autouvmd \
 && cp /opt/autouvmd/etc/autouvmd/autouvmd.container.yaml /etc/autouvmd/autouvmd.yaml \
 && chown autouvmd:autouvmd /models /state
USER 10001:10001
VOLUME ["/models", "/state"]
EXPOSE 50051 9090 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=300s --retries=3 \
  CMD curl -fsS http://127.0.0.1:9090/readyz || exit 1
ENTRYPOINT ["/opt/autouvmd/bin/autouvmd", "--config", "/etc/autouvmd/autouvmd.yaml"]
