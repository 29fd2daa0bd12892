# nodedns-frontend: a static Go binary on Debian slim with iptables.
# Build from the repository root (make images):
#   docker build -f images/frontend.Dockerfile -t nodedns-frontend .
#
# iptables: the frontend finds out itself whether the host's rules live in
# iptables-legacy or iptables-nft (the hint chains kubelet and kube-proxy
# create, else the backend with more rules) and runs iptables-legacy /
# iptables-nft (and ip6tables-*) by name, so the image needs both and no
# wrapper entrypoint. Debian's iptables package ships both.

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
COPY shared/ shared/
COPY frontend/ frontend/
ARG VERSION=dev
RUN --mount=type=cache,target=/root/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" \
      -o /out/nodedns-frontend ./frontend

FROM debian:trixie-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends iptables \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/nodedns-frontend /usr/local/bin/nodedns-frontend
# Root, for netlink and iptables; the chart grants only NET_ADMIN, NET_RAW
# and NET_BIND_SERVICE and drops everything else.
ENTRYPOINT ["nodedns-frontend"]
