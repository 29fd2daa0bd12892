# nodedns-backend: CoreDNS with nodedns's plugin list, a static Go binary on
# distroless/static, as the nonroot user. Build from the repository root
# (make images):
#   docker build -f images/backend.Dockerfile -t nodedns-backend .
#
# The binary embeds its default Corefile; the chart mounts one from a
# ConfigMap and passes -conf. It binds only unprivileged ports (5300, 5301,
# 8181, 9153, 9155), so it needs no capability.

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
COPY backend/ backend/
ARG VERSION=dev
RUN --mount=type=cache,target=/root/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" \
      -o /out/nodedns-backend ./backend

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/nodedns-backend /usr/local/bin/nodedns-backend
USER 65532:65532
ENTRYPOINT ["nodedns-backend"]
