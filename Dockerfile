# kim: the Runtime reconciler and the runtimes/status admission webhook.
#   docker build -t ghcr.io/kyma-project/kim:0.1.0 .
# The builder is Debian 12 (bookworm), like the runtime image, so the binary's
# glibc matches. TLS is rustls + ring: no OpenSSL at build or run time.

FROM rust:1.95-slim-bookworm AS builder
WORKDIR /build
ENV CARGO_TERM_COLOR=never \
    CARGO_INCREMENTAL=0 \
    CARGO_PROFILE_RELEASE_DEBUG=0

# Dependency layer: rebuilt only when Cargo.toml or Cargo.lock change.
# src/ and every [[bench]]/[[test]]/[[example]] declared without a path get a
# stub (Cargo refuses a manifest whose inferred target files are missing), then
# only the dependencies are compiled.
COPY Cargo.toml Cargo.lock ./
RUN mkdir -p src \
 && echo 'fn main() {}' > src/main.rs \
 && touch src/lib.rs \
 && awk 'function flush() { if (k != "" && n != "" && !p) print k, n; k = ""; n = ""; p = 0 } \
         /^\[/ { flush() } \
         /^\[\[(bench|test|example)\]\]/ { k = $0; gsub(/[][]/, "", k) } \
         k != "" && /^name *=/ { n = $0; sub(/^name *= *"/, "", n); sub(/".*/, "", n) } \
         k != "" && /^path *=/ { p = 1 } \
         END { flush() }' Cargo.toml \
    | while read -r kind name; do \
        case "$kind" in bench) d=benches ;; test) d=tests ;; *) d=examples ;; esac; \
        mkdir -p "$d" && echo 'fn main() {}' > "$d/$name.rs"; \
      done \
 && cargo build --release --locked --bin kim \
 && rm -rf target/release/.fingerprint/kim-* target/release/deps/kim-* target/release/deps/libkim-* target/release/kim

# The application itself.
COPY . .
RUN touch src/lib.rs src/main.rs \
 && cargo build --release --locked --bin kim \
 && install -D -m 0755 target/release/kim /out/kim

# distroless/cc: glibc, libgcc, CA certificates; no shell, no package manager.
FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.title="kim" \
      org.opencontainers.image.description="Kyma Infrastructure Manager: Runtime reconciler and runtimes/status admission webhook" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /out/kim /kim
USER 65532:65532
# 9443: webhook (HTTPS), 8080: metrics (HTTP)
EXPOSE 9443 8080
ENTRYPOINT ["/kim"]
