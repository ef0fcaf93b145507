# syntax=docker/dockerfile:1
# The Go binaries of this repo in one small image. The compose stack runs it twice, with
# entrypoint /usr/local/bin/api or /usr/local/bin/consumer.

FROM golang:1.26.8-bookworm AS build
WORKDIR /src
# Dependencies first: this layer is reused until go.mod or go.sum change.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# CGO_ENABLED=0: a static binary that needs no libc, so it runs on distroless/static.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags="-s -w" -o /out/ ./cmd/api ./cmd/consumer

# distroless/static: CA certificates, tzdata and /etc/passwd, no shell or package manager.
# The :nonroot tag runs as uid 65532.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/api /out/consumer /usr/local/bin/
USER nonroot:nonroot
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/api"]
