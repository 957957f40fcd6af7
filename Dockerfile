# syntax=docker/dockerfile:1
# The converge daemon and CLI as a static binary on distroless, with converge-decrypt (the
# SOPS decryption program converge starts from its own folder): make image, or
#   docker build --build-arg VERSION=v0.1.0 -t ghcr.io/converge-dev/converge:v0.1.0 .

FROM --platform=$BUILDPLATFORM golang:1.26 AS build
ARG VERSION=dev
ARG TARGETOS
ARG TARGETARCH
ENV GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
# Only what the binary is built from (DESIGN.md fixes the top-level folders); e2e/ and
# docs/ stay out of the build context's layers.
COPY cmd/ cmd/
COPY deploy/ deploy/
COPY engine/ engine/
COPY inventory/ inventory/
COPY sources/ sources/
COPY status/ status/
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH:-amd64} \
    go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/converge ./cmd/converge && \
    GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH:-amd64} \
    go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/converge-decrypt ./cmd/converge-decrypt

# Static, non-root (65532), no shell; CA certificates included for https:// git remotes.
FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/converge /converge
COPY --from=build /out/converge-decrypt /converge-decrypt
USER 65532:65532
ENTRYPOINT ["/converge"]
CMD ["run"]
