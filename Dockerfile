# The ruleop image for those with a container engine (`docker build -t ruleop .`). `make image`
# builds the same image without one (scripts/image.sh): a static binary on an empty base.
# syntax=docker/dockerfile:1

FROM rust:1.89-bookworm AS build
ARG TARGET=x86_64-unknown-linux-gnu
WORKDIR /src
COPY . .
# Static glibc: the runtime stage has no libc, loader or libgcc_s.
RUN RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --locked --profile dist --target "$TARGET" --bin ruleop \
 && cp "target/$TARGET/dist/ruleop" /ruleop

FROM scratch
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG SOURCE=https://github.com/ruleop/ruleop
LABEL org.opencontainers.image.title="ruleop" \
      org.opencontainers.image.description="A Kubernetes operator that is a declarative rules engine" \
      org.opencontainers.image.source="$SOURCE" \
      org.opencontainers.image.revision="$REVISION" \
      org.opencontainers.image.version="$VERSION" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /ruleop /ruleop
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/ruleop"]
