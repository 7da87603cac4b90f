# The bucketscan image (operator and worker in one), for those who build with
# Docker. Without Docker, e2e/images/build.sh makes the same image as a
# tarball: the release binaries plus exactly the libraries they load.
#   docker build -t bucketscan:0.1.0 .
FROM rust:1.94-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p bucketscan-operator -p bucketscan-worker \
 && mkdir /out \
 && strip -o /out/bucketscan-operator target/release/bucketscan-operator \
 && strip -o /out/bucketscan-worker target/release/bucketscan-worker

# glibc, libgcc and CA certificates, no shell, user nonroot (65532).
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/bucketscan-operator /out/bucketscan-worker /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/bucketscan-worker"]
